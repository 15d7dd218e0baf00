"""A fact the engine cannot read fails that fact, never the run (issue 11 §1), and observing leaves no
mark (§3). Torch is the oracle: the run ends as a plain run does, and what is read is what torch says."""

from __future__ import annotations

from torch_oracle import assert_tensor, run_plain, trace


def _last(source: str) -> dict:
    result = trace(source)
    assert result["ok"] and result["error"] is None, result["error"]
    return result["steps"][-1]


def test_a_module_whose_init_runs_a_line_before_super_init_is_traced() -> None:
    source = (
        "class Net(nn.Module):\n    def __init__(self):\n        size = 3\n        super().__init__()\n"
        "        self.fc = nn.Linear(size, 1)\nnet = Net()\n"
    )
    step = _last(source)
    plain = run_plain(source)
    assert_tensor(step, step["variables"]["net.fc.weight"], plain.namespace["net"].fc.weight)


def test_a_lazy_module_says_its_parameter_is_unread_then_reads_it_once_initialised() -> None:
    source = "m = nn.LazyLinear(3)\nbefore = 1\ny = m(torch.ones(2, 4))\n"
    result = trace(source)
    assert result["ok"], result["error"]
    uninitialised = result["steps"][1]  # after `before = 1`: the weight is an UninitializedParameter
    fact = uninitialised["tensors"][uninitialised["variables"]["m.weight"]]
    assert fact["unavailable"], fact
    last = result["steps"][-1]
    assert_tensor(last, last["variables"]["m.weight"], run_plain(source).namespace["m"].weight)


def test_a_nested_tensor_is_reported_without_failing_the_run() -> None:
    step = _last("n = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])\nafter = 1\n")
    fact = step["tensors"][step["variables"]["n"]]
    assert fact["unavailable"], fact  # its shape is not one tuple: said, not guessed


def test_a_view_of_a_storage_resized_to_nothing_reads_no_values_past_it() -> None:
    """Reading the view's values would read out of bounds (a segfault before): bounds come first."""
    step = _last("a = torch.arange(6.0)\nv = a[2:]\na.untyped_storage().resize_(0)\nb = 1\n")
    fact = step["tensors"][step["variables"]["v"]]
    assert fact["values"] is None and "values" in fact["unavailable"], fact


def test_grad_fn_metadata_is_a_plain_runs() -> None:
    source = "x = torch.ones(2, requires_grad=True)\ny = x * 2\nprint(dict(y.grad_fn.metadata))\n"
    result = trace(source)
    assert result["steps"][-1]["stdout"] == run_plain(source).stdout == "{}\n"
