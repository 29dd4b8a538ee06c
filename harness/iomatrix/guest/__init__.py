"""Inside the VM: the agent that sets up disks and stacks, runs the workloads and writes results."""
