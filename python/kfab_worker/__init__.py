"""kfab's Python worker: evaluates candidates for KernelBench-format tasks (a `Model` nn.Module,
`get_inputs()`, `get_init_inputs()`) under the runner protocol of docs/runner-protocol.md, in a process
of its own that kfab starts, limits, times out and replaces like kfab-runner."""

PROTOCOL = 1
