"""What every backend shares (no client library here): handing a reader thread's output to the loop."""
