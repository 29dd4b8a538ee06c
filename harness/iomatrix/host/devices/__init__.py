"""The host's own block devices a matrix names (`backing: host`): confirmed on the command line,
never in use, and checked again right before each boot (checks)."""
