"""Booting a guest: the vng command (vng), the host cores it is pinned to (cores), its own root
(guest_root) and what it is lent and gives back (guest_io); one boot (boot) under a watchdog
(watchdog), its console read (console), and the results the host writes for cells a dead VM did not
finish (cell_results); QEMU's view of its disks (qmp, host_disks); and a run's boots, one after
another or side by side (execute).
"""
