"""What the op tests share."""

import torch


def assert_one_graph_as_eager(fn, args, leaves):
    """fn(*args) -> a scalar loss, compiled with fullgraph=True (a graph break fails): its value and its gradients
    with respect to `leaves` equal eager's."""
    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    eager, fast = fn(*args), compiled(*args)
    torch.testing.assert_close(fast, eager)
    for g_fast, g_eager in zip(torch.autograd.grad(fast, leaves), torch.autograd.grad(eager, leaves)):
        torch.testing.assert_close(g_fast, g_eager)
