"""One module per ``briskbert`` subcommand, each with ``main(argv)``: parse the flags, then import the heavy
libraries and run the job. The table of subcommands is :data:`briskbert.cli.COMMANDS`."""
