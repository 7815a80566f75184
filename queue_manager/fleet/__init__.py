"""What several instances share besides the line: the leader lease and the control channel."""
