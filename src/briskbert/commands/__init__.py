"""One module per ``briskbert`` subcommand (see ``briskbert.cli.COMMANDS``): ``main(argv)`` parses, then runs."""
