"""epochfs.fuse."""
