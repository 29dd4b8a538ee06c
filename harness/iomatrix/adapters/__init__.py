"""Pure knowledge of external tools and kernel interfaces: fio, bonnie++, /proc/stat, mkfs."""
