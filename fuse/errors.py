"""The FUSE side's one error type for bad input, kept here so fuse imports only the store from sidecar."""


class MountError(ValueError):
    """A bad mount point, link root or FUSE setting; the message starts with the flag or variable.

    The ``epochfs`` command prints it in one line and exits with status 2, like a bad flag.
    """
