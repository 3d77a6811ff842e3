"""The warm server: `sandboxctl` commands forked from a process that has already started up."""
