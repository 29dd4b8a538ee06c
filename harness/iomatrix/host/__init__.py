"""The host side of a run: kernels, the VM's argv, the accelerator, boots and sessions."""
