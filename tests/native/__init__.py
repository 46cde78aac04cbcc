"""Native test programs for the eBPF tests, and the harness that records and queries them."""
