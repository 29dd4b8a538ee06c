"""The run folder and the archive: every path, atomic files, record I/O and migrations, merges."""
