"""The `opbench` command line: main.py dispatches, one thin module per subcommand."""
