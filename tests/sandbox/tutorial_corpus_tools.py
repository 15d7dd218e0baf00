"""Tools around a model as the recipes use them: ``torch.jit.trace``, the profiler recipe (what it
records, not how long it took), ``torch.autograd.profiler``, ``torch.utils.checkpoint`` of a
sequential, ``nn.utils`` helpers, and regular expressions as the text tutorials write them."""

from __future__ import annotations

from tutorial_registry import snippet

snippet("jit-trace", """\
class MyDecisionGate(nn.Module):
    def forward(self, x):
        return x * 2
class MyCell(nn.Module):
    def __init__(self):
        super().__init__()
        self.dg = MyDecisionGate()
        self.linear = nn.Linear(4, 4)
    def forward(self, x, h):
        new_h = torch.tanh(self.dg(self.linear(x)) + h)
        return new_h, new_h
my_cell = MyCell()
x, h = torch.rand(3, 4), torch.rand(3, 4)
traced_cell = torch.jit.trace(my_cell, (x, h))
print(type(traced_cell).__name__)
print(traced_cell.code)
a, b = traced_cell(x, h)
print(torch.allclose(a, my_cell(x, h)[0]), a.requires_grad, a.grad_fn is not None)
a.sum().backward()
print(my_cell.linear.weight.grad.shape, torch.jit.is_scripting(), torch.jit.is_tracing())
def f(x):
    return x.relu() + 1
traced_f = torch.jit.trace(f, torch.randn(2))
print(traced_f(torch.tensor([-1.0, 2.0])))
""")

snippet("jit-trace-warning", """\
def g(x):
    if x.sum() > 0:
        return x * 2
    return x
traced = torch.jit.trace(g, torch.ones(2))
print(traced(-torch.ones(2)))
""")

snippet("profiler-recipe", """\
from torch.profiler import profile, record_function, ProfilerActivity
model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 2))
inputs = torch.randn(2, 3, 16, 16)
with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
    with record_function("model_inference"):
        model(inputs)
events = prof.key_averages()
shown = ("aten::conv", "aten::relu", "aten::linear", "model")
print(sorted((e.key, e.count) for e in events if e.key.startswith(shown)))
by_shape = prof.key_averages(group_by_input_shape=True)
print(sorted(str(e.input_shapes) for e in by_shape if e.key == "aten::addmm"))
table = events.table(sort_by="cpu_time_total", row_limit=3)
print(table.splitlines()[1].split()[:2])
""")

snippet("profiler-backward-schedule", """\
from torch.profiler import profile, schedule, ProfilerActivity
model = nn.Linear(4, 2)
seen = []
def trace_handler(p):
    seen.append(sorted({e.key for e in p.key_averages() if e.key.startswith("aten::")})[:5])
with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=2),
             on_trace_ready=trace_handler) as p:
    for step in range(5):
        model(torch.randn(3, 4)).sum().backward()
        p.step()
print(len(seen), seen)
with torch.autograd.profiler.profile() as legacy:
    torch.ones(3).mul(2)
print(sorted({e.key for e in legacy.key_averages()}))
""")

snippet("checkpoint-sequential", """\
from torch.utils.checkpoint import checkpoint_sequential, checkpoint
model = nn.Sequential(*[nn.Sequential(nn.Linear(8, 8), nn.Tanh()) for _ in range(4)])
x = torch.randn(2, 8, requires_grad=True)
out = checkpoint_sequential(model, 2, x, use_reentrant=False)
out.sum().backward()
grad_ckpt = x.grad.clone()
x.grad = None
model.zero_grad()
model(x).sum().backward()
print(torch.allclose(grad_ckpt, x.grad), out.shape)
def block(a, b):
    return (a @ b).relu()
w = torch.randn(8, 8, requires_grad=True)
y = checkpoint(block, x, w, use_reentrant=True)
y.mean().backward()
print(w.grad.shape, y.grad_fn.name())
""")

snippet("nn-utils-helpers", """\
from torch.nn.utils import parameters_to_vector, vector_to_parameters, clip_grad_value_
model = nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 1))
vec = parameters_to_vector(model.parameters())
print(vec.shape, vec.requires_grad, vec.grad_fn.name())
vector_to_parameters(torch.arange(vec.numel(), dtype=torch.float), model.parameters())
print(model[0].weight, model[1].bias)
model(torch.ones(4, 3)).sum().backward()
clip_grad_value_(model.parameters(), clip_value=1.5)
print([p.grad.abs().max().item() for p in model.parameters()])
total = nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0, norm_type=2.0)
print(total.round(decimals=4),
      nn.utils.get_total_norm([p.grad for p in model.parameters()]).round(decimals=4))
sn = nn.utils.parametrizations.spectral_norm(nn.Linear(4, 4))
print(sorted(n for n, _ in sn.named_parameters()), type(sn.parametrizations.weight[0]).__name__)
""")

snippet("regex-text-prep", """\
import re
import unicodedata
def unicodeToAscii(s):
    return ''.join(c for c in unicodedata.normalize('NFD', s) if unicodedata.category(c) != 'Mn')
def normalizeString(s):
    s = unicodeToAscii(s.lower().strip())
    s = re.sub(r"([.!?])", r" \\1", s)
    s = re.sub(r"[^a-zA-Z!?]+", r" ", s)
    return s.strip()
pattern = re.compile(r"\\b(\\w+)\\s+\\1\\b")
print(normalizeString("Ça va très   bien!"), normalizeString("Où est la gare ?"))
print(pattern.findall("the the cat sat sat down"), pattern.sub(r"\\1", "go go now"))
tokenizer = re.compile(r"\\w+|[^\\w\\s]")
tokens = tokenizer.findall("Hello, world! It's 2024.")
vocab = {w: i for i, w in enumerate(sorted(set(tokens)))}
print(tokens, torch.tensor([vocab[t] for t in tokens]))
print(re.split(r"\\s+", "a  b\\tc"), bool(re.match(r"^[a-z]+$", "abc")), re.fullmatch(r"\\d+", "12a"))
""")

snippet("jit-trace-graph", """\
class Cell(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)
    def forward(self, x, h):
        new_h = torch.tanh(self.linear(x) + h)
        return F.softmax(new_h, dim=1), new_h.relu()
traced = torch.jit.trace(Cell(), (torch.rand(3, 4), torch.rand(3, 4)))
print(traced.graph)
print(traced.inlined_graph)
""")
