"""What every backend shares (no client library here): the labels and names that mark a sandbox as ours, the
/tmp rule, the host paths no workspace may be, the lazy connection, the thread bridge and blocking-call pool,
a session's stdin writer, the launch message, the bounded stream sink and the reader-to-loop relay."""
