"""epochfs.sidecar."""
