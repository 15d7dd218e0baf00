"""GPU code run with cuda mapped to the CPU (``EngineLimits(cuda_on_cpu=True)``, issue 24, 5).

Torch is the oracle twice over: the numbers are those of the same code run plainly on the CPU (the
kernels are the same ones), and what the code is told about devices is what torch tells code on a
one-GPU machine — its own formatting (``print`` adds ``device='cuda:0'``), its own refusals (a CPU
tensor in a cuda op, ``.numpy()`` of a cuda tensor: the same words torch says for another device).
"""

from __future__ import annotations

import pytest
import torch
from torch_oracle import Plain, assert_values, resolve, run_plain, trace

from app.engine import EngineLimits, trace_delta
from app.trace.gpu import round_size

ARTICLE_LOOP = """\
device = torch.device("{device}" if torch.cuda.is_available() else "cpu")
model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 1)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
losses = []
for step in range(3):
    x = torch.randn(4, 6, device=device)
    y = torch.randn(4, 1).to(device, non_blocking=True)
    loss = ((model(x) - y) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.detach().cpu())
    torch.cuda.synchronize() if torch.cuda.is_available() else None
    print(step, round(loss.item(), 4), x.is_cuda, x.device.type)
"""


def simulated(code: str, **limits: object) -> dict:
    return trace(code, cuda_on_cpu=True, **limits)


def last(result: dict) -> dict:
    return result["steps"][-1]


def devices(step: dict) -> dict[str, str]:
    return {name: step["tensors"][tid]["device"] for name, tid in step["variables"].items()}


def assert_same_numbers(step: dict, plain: Plain) -> None:
    """Every tensor the step names holds what the plain CPU run's holds (values, shape, dtype, grad)."""
    for label, tid in step["variables"].items():
        fact, t = step["tensors"][tid], resolve(plain.namespace, label)
        assert (fact["shape"], fact["dtype"]) == (list(t.shape), str(t.dtype).removeprefix("torch.")), label
        assert_values(fact["values"], t)
        if t.is_leaf and t.grad is not None:
            assert_values(step["tensors"][fact["grad"]]["values"], t.grad)


def test_the_articles_gpu_loop_runs_unchanged() -> None:
    result = simulated(ARTICLE_LOOP.format(device="cuda"))
    assert result["ok"], result["error"]
    assert result["cuda_on_cpu"] is True
    plain = run_plain(ARTICLE_LOOP.format(device="cpu"))  # the numbers: the same CPU kernels
    step = last(result)
    assert step["stdout"] == plain.stdout.replace("False cpu", "True cuda")
    assert_same_numbers(step, plain)
    shown = devices(step)
    assert {shown[n] for n in ("x", "y", "loss", "model.0.weight", "model.2.bias")} == {"cuda:0"}
    assert {shown[f"losses[{i}]"] for i in range(3)} == {"cpu"}  # .detach().cpu() copies to the host
    grads = {step["tensors"][step["tensors"][tid]["grad"]]["device"]
             for name, tid in step["variables"].items() if name.startswith("model.")}
    assert grads == {"cuda:0"}  # made by autograd in C++: on their parameters' device
    momentum = [t for t in step["tensors"].values() if t["device"] == "cpu" and t["shape"] == [8, 6]]
    assert not momentum  # the optimizer's state is on the parameters' device too


def test_without_the_option_the_code_is_told_the_way_forward() -> None:
    result = trace('x = torch.ones(2)\ny = x.cuda()\n')
    error = result["error"]
    assert (error["code"], error["line"], error["type"]) == ("runtime.no_cuda", 2, "AssertionError")
    assert error["params"]["detail"] == "Torch not compiled with CUDA enabled"  # torch's words, kept
    assert "cuda_on_cpu" in error["message"]
    assert result["cuda_on_cpu"] is False


def test_printing_says_cuda_as_torch_does() -> None:
    result = simulated("""\
x = torch.tensor([1.0, 2.0], device="cuda")
w = torch.ones(2, device="cuda", requires_grad=True)
p = nn.Parameter(torch.zeros(1).cuda())
print(x)
print(w * 2)
print([x.int()], f"{x}", f"{x.sum()}", f"{x.sum():.1f}")
print(p)
print(x.device, x.is_cuda, x.is_cpu, x.get_device(), x.device.type == "cuda", x.device.index)
print(torch.ones(2), torch.ones(2).device, torch.ones(2).get_device())
""")
    assert result["ok"], result["error"]
    assert last(result)["stdout"] == (
        "tensor([1., 2.], device='cuda:0')\n"
        "tensor([2., 2.], device='cuda:0', grad_fn=<MulBackward0>)\n"
        "[tensor([1, 2], device='cuda:0', dtype=torch.int32)] tensor([1., 2.], device='cuda:0') 3.0 3.0\n"
        "Parameter containing:\ntensor([0.], device='cuda:0', requires_grad=True)\n"
        "cuda:0 True False 0 True 0\n"
        "tensor([1., 1.]) cpu -1\n"
    )


def test_transfers_copy_as_a_real_device_does() -> None:
    result = simulated("""\
x = torch.ones(3, requires_grad=True)
y = x.cuda()
same = (y.cuda() is y, y.to("cuda") is y, y.to("cuda:0", copy=True) is y, y.cpu() is y, x.cpu() is x)
z = (y * 2).sum()
z.backward()
back = y.detach().to("cpu")
print(same, y.grad_fn.name(), x.grad, x.grad.device)
""")
    assert result["ok"], result["error"]
    step = last(result)
    assert step["stdout"] == "(True, True, False, False, True) ToCopyBackward0 tensor([2., 2., 2.]) cpu\n"
    tensors, names = step["tensors"], step["variables"]
    assert devices(step) == {"x": "cpu", "y": "cuda:0", "z": "cuda:0", "back": "cpu"}
    storages = {name: tensors[tid]["storage"] for name, tid in names.items()}
    assert len({storages["x"], storages["y"], storages["back"]}) == 3  # each move is a copy
    # The gradient crossed back to the host as a copy of its own, as from a GPU.
    sent = [s for s in result["steps"] if s["phase"] == "backward"
            and s["nodes"].get(s["node"], {}).get("name") == "ToCopyBackward0"]
    assert sent, "the transfer's node had its step"
    received, passed = sent[0]["received"][0], sent[0]["sent"][0]
    assert received != passed
    assert sent[0]["tensors"][received]["device"] == "cuda:0"
    assert sent[0]["tensors"][passed]["device"] == "cpu"
    assert tensors[tensors[names["x"]]["grad"]]["device"] == "cpu"


def test_a_module_moved_keeps_its_parameters() -> None:
    result = simulated("""\
model = nn.Linear(2, 2)
w = model.weight
model.to("cuda")
print(w is model.weight, w.device, model.weight.is_cuda, model.cuda() is model)
""")
    assert result["ok"], result["error"]
    assert last(result)["stdout"] == "True cuda:0 True True\n"
    assert devices(last(result))["w"] == "cuda:0"


@pytest.mark.parametrize(("line", "error"), [
    ("torch.ones(2, device='cuda') + torch.ones(2)", RuntimeError),
    ("F.cross_entropy(torch.zeros(2, 3, device='cuda'), torch.tensor([0, 1]))", RuntimeError),
    ("torch.ones(2, device='cuda').numpy()", TypeError),
    ("torch.ones(2).to('cuda:1')", RuntimeError),
    ("torch.ones(2, device='cuda').pin_memory()", RuntimeError),
])
def test_what_a_gpu_refuses_is_refused(line: str, error: type[Exception]) -> None:
    result = simulated(f"x = 1\n{line}\n")
    assert result["error"]["type"] == error.__name__ and result["error"]["line"] == 2


def test_the_refusals_use_torchs_own_words() -> None:
    # torch's own text for another device (meta) is the oracle of the text for cuda:0
    try:
        torch.ones(2, device="meta").numpy()
    except TypeError as refused:
        expected = str(refused).replace("meta", "cuda:0")
    result = simulated("torch.ones(2, device='cuda').numpy()\n")
    assert result["error"]["message"] == expected
    mixed = simulated("torch.ones(2, device='cuda') * torch.ones(2)\n")["error"]["message"]
    assert mixed.startswith("Expected all tensors to be on the same device")
    scalar = simulated("print(torch.ones(2, device='cuda') * torch.tensor(3.0))\n")  # a CPU scalar is fine
    assert last(scalar)["stdout"] == "tensor([3., 3.], device='cuda:0')\n"


def test_mixed_precision_and_pinned_loading_run_as_on_a_gpu() -> None:
    result = simulated("""\
from torch.utils.data import DataLoader, TensorDataset
data = TensorDataset(torch.randn(8, 4), torch.tensor([0, 1, 2, 0] * 2))
loader = DataLoader(data, batch_size=4, pin_memory=True)
model = nn.Linear(4, 3).cuda()
opt = torch.optim.Adam(model.parameters())
scaler = torch.amp.GradScaler("cuda")
for xb, yb in loader:
    pinned = xb.is_pinned()
    xb, yb = xb.to("cuda", non_blocking=True), yb.to("cuda", non_blocking=True)
    with torch.autocast(device_type="cuda"):
        out = model(xb)
        loss = F.cross_entropy(out, yb)
    opt.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
print(pinned, out.dtype, loss.dtype, scaler.is_enabled(), scaler.get_scale())
""")
    assert result["ok"], result["error"]
    # CUDA autocast's float16 (run as CPU autocast in the dtype CUDA's picks); no warning that there
    # is no accelerator to pin for, or no CUDA to scale for: a GPU machine prints none.
    assert last(result)["stdout"] == "True torch.float16 torch.float32 True 65536.0\n"
    assert devices(last(result))["out"] == "cuda:0"


def test_torch_cuda_answers_as_one_device() -> None:
    result = simulated("""\
a = torch.ones(100, device="cuda")
b = torch.ones(1000, device="cuda")
c = torch.ones(5000)
print(torch.cuda.is_available(), torch.cuda.device_count(), torch.cuda.current_device())
print(torch.cuda.get_device_name(0), torch.accelerator.current_accelerator())
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
torch.cuda.synchronize()
end.record()
print(start.elapsed_time(end) >= 0)
""")
    assert result["ok"], result["error"]
    step = last(result)
    assert step["stdout"].splitlines()[:3] == ["True 1 0", "cuda:0 (simulated on the CPU) cuda", "True"]
    # memory_allocated(): the model's blocks (app.trace.gpu) of what is on cuda:0 at the step before
    # its line: a and b, not c
    before = result["steps"][-2]
    storages = [before["storages"][before["tensors"][before["variables"][n]]["storage"]] for n in ("a", "b")]
    printed = simulated('a = torch.ones(100, device="cuda")\nb = torch.ones(1000, device="cuda")\n'
                        "c = torch.ones(5000)\nprint(torch.cuda.memory_allocated())\n")
    expected = sum(round_size(s["nbytes"]) for s in storages)
    assert last(printed)["stdout"] == f"{expected}\n" == f"{512 + 4096}\n"


@pytest.mark.parametrize(("line", "code"), [
    ("torch.cuda.max_memory_allocated()", "runtime.cuda_not_simulated"),
    ("torch.cuda.FloatTensor(2)", "runtime.cuda_not_simulated_detail"),
    ("nn.DataParallel(nn.Linear(1, 1).cuda())", "runtime.cuda_not_simulated"),
])
def test_what_is_not_simulated_says_so(line: str, code: str) -> None:
    error = simulated(f"x = torch.ones(1).cuda()\n{line}\n")["error"]
    assert (error["code"], error["line"]) == (code, 2)
    assert "not simulated when cuda runs on the CPU" in error["message"]


def test_incremental_snapshots_equal_whole_ones() -> None:
    code = ARTICLE_LOOP.format(device="cuda")
    incremental, whole = (simulated(code, full_snapshots=full)["steps"] for full in (False, True))
    assert incremental == whole


def test_the_run_leaves_torch_as_it_found_it() -> None:
    autocast_init = torch.amp.autocast_mode.autocast.__init__
    trace_delta("x = torch.ones(1).cuda()\nraise ValueError('stop')\n", EngineLimits(cuda_on_cpu=True))
    assert not torch.cuda.is_available()
    assert torch.accelerator.current_accelerator() is None
    assert torch.amp.autocast_mode.autocast.__init__ is autocast_init
    assert torch.overrides._get_current_function_mode_stack() == []
    with pytest.raises(AssertionError, match="not compiled with CUDA"):
        torch.ones(1).cuda()




# "Learning PyTorch with examples" sets the default device: torch.set_default_device(device), with
# device "cuda" when torch says there is one; `with torch.device("cuda"):` does the same for a block.
DEFAULT_DEVICE = """\
import math
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.set_default_device(device)
x = torch.linspace(-math.pi, math.pi, 20)
a = torch.randn((), requires_grad=True)
loss = (a * x - torch.sin(x)).pow(2).sum()
loss.backward()
with torch.device("cpu"):
    here = torch.zeros(2)
m = nn.Linear(2, 1)
torch.set_default_device(None)
later = torch.ones(1)
print(x.device, a.grad.device, here.device, m.weight.device, later.device, torch.get_default_device())
"""


def test_the_default_device_set_to_cuda_is_the_simulated_one() -> None:
    result = simulated(DEFAULT_DEVICE)
    assert result["ok"], result["error"]
    step = last(result)
    assert step["stdout"] == "cuda:0 cuda:0 cpu cuda:0 cpu cpu\n"
    plain = run_plain(DEFAULT_DEVICE)  # no GPU here: the plain run takes the "cpu" branch
    assert plain.stdout == "cpu cpu cpu cpu cpu cpu\n"
    assert_same_numbers(step, plain)
    shown = devices(step)
    assert {shown[n] for n in ("x", "a", "loss", "m.weight")} == {"cuda:0"}
    assert {shown[n] for n in ("here", "later")} == {"cpu"}


def test_a_block_on_the_cuda_device_makes_its_tensors_there() -> None:
    result = simulated('with torch.device("cuda"):\n    m = nn.Linear(3, 2)\n    x = torch.ones(1, 3)\n'
                       'y = m(x)\nz = torch.ones(1)\nprint(y.is_cuda, z.is_cuda)\n')
    assert result["ok"], result["error"]
    assert last(result)["stdout"] == "True False\n"
    assert {name: d for name, d in devices(last(result)).items() if name in ("x", "y", "z")} == \
        {"x": "cuda:0", "y": "cuda:0", "z": "cpu"}
