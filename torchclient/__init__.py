"""epochfs.torchclient."""
