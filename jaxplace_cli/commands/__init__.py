"""One module per subcommand; each is a thin function over library code."""
