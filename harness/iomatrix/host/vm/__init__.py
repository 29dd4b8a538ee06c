"""Booting a guest: the vng command (vng), the host cores it is pinned to (cores), its own root
(guest_root) and what it is lent and gives back (guest_io), one boot under a watchdog (boot), QEMU's
view of its disks (qmp, host_disks), and a run's boots one after another or side by side (execute).
"""
