"""What each command prints as text, one module per command: a command module only parses its
arguments, runs its workflow and chooses this text or `accuracy.core.json_output`'s JSON."""
