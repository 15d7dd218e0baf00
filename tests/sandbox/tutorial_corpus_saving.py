"""Saving and showing models: ``torch.save``/``torch.load`` through an ``io.BytesIO``, ``state_dict``
round trips, ``copy.deepcopy``, ``print(model)``, tensors of every dtype as ``print`` shows them,
``torch.manual_seed`` determinism, and warnings as torch raises them."""

from __future__ import annotations

from tutorial_registry import snippet

# -- "Saving and loading models": to memory, as a file would be -------------------------------------

snippet("save-load-bytesio", """\
import io
class TheModelClass(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.fc1 = nn.Linear(6 * 2 * 2, 10)
    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        return self.fc1(torch.flatten(x, 1))
model = TheModelClass()
optimizer = torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9)
print("Model's state_dict:")
for param_tensor in model.state_dict():
    print(param_tensor, "\\t", model.state_dict()[param_tensor].size())
buffer = io.BytesIO()
torch.save(model.state_dict(), buffer)
buffer.seek(0)
model2 = TheModelClass()
print(model2.load_state_dict(torch.load(buffer, weights_only=True)))
model2.eval()
x = torch.randn(1, 3, 9, 9)
print(torch.equal(model(x), model2(x)))
""")

snippet("save-general-checkpoint", """\
import io
model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
x, y = torch.randn(16, 3), torch.randn(16, 1)
for epoch in range(3):
    optimizer.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
checkpoint = io.BytesIO()
torch.save({
    'epoch': epoch,
    'model_state_dict': model.state_dict(),
    'optimizer_state_dict': optimizer.state_dict(),
    'loss': loss,
}, checkpoint)
checkpoint.seek(0)
restored = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
restored_opt = torch.optim.Adam(restored.parameters(), lr=0.01)
ckpt = torch.load(checkpoint)
restored.load_state_dict(ckpt['model_state_dict'])
restored_opt.load_state_dict(ckpt['optimizer_state_dict'])
print(ckpt['epoch'], round(ckpt['loss'].item(), 4), sorted(ckpt))
print(restored_opt.state_dict()['state'][0]['step'], restored_opt.param_groups[0]['lr'])
restored.train()
for m, opt in ((model, optimizer), (restored, restored_opt)):
    opt.zero_grad()
    F.mse_loss(m(x), y).backward()
    opt.step()
print(all(torch.equal(a, b) for a, b in zip(model.parameters(), restored.parameters())))
""")

snippet("save-tensors-and-views", """\
import io
x = torch.arange(10.0)
views = {"whole": x, "even": x[::2], "tail": x[5:]}
f = io.BytesIO()
torch.save(views, f)
print(f.tell() > 0)
f.seek(0)
loaded = torch.load(f)
loaded["whole"][6] = -1
print(loaded["tail"], loaded["even"])
print(loaded["tail"].untyped_storage().data_ptr() == loaded["whole"].untyped_storage().data_ptr())
print(x)
""")

snippet("state-dict-surgery", """\
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8))
        self.head = nn.Linear(8, 2)
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
    def forward(self, x):
        self.steps += 1
        return self.head(self.body(x).relu())
net = Net()
sd = net.state_dict()
print(list(sd.keys()))
print([(k, tuple(v.shape), v.dtype) for k, v in sd.items() if not k.endswith("weight")])
head_only = {k.removeprefix("head."): v for k, v in sd.items() if k.startswith("head.")}
fresh = nn.Linear(8, 2)
print(fresh.load_state_dict(head_only))
partial = {k: v for k, v in sd.items() if k.startswith("body.")}
result = Net().load_state_dict(partial, strict=False)
print(result.missing_keys, result.unexpected_keys)
try:
    Net().load_state_dict({"head.weight": torch.zeros(3, 8)}, strict=False)
except RuntimeError as e:
    print(str(e).splitlines()[0])
    print(str(e).splitlines()[1].strip())
net(torch.randn(5, 4))
print(net.steps, net.state_dict()["steps"], net.state_dict(keep_vars=True)["head.bias"].requires_grad)
""")

snippet("deepcopy-model", """\
import copy
model = nn.Sequential(nn.Linear(2, 2), nn.Tanh())
model[0].weight.data.fill_(0.5)
twin = copy.deepcopy(model)
twin[0].weight.data.mul_(2)
print(model[0].weight)
print(twin[0].weight)
print(model[0].weight is twin[0].weight, twin[0].weight.requires_grad)
x = torch.ones(1, 2, requires_grad=True)
y = x * 3
y_copy = copy.deepcopy(x)
print(y_copy.requires_grad, y_copy.is_leaf, y_copy.grad_fn)
try:
    copy.deepcopy(y)
except RuntimeError as e:
    print(e)
best = copy.deepcopy(model.state_dict())
model[0].weight.data.zero_()
model.load_state_dict(best)
print(model[0].weight.sum().item())
ema = copy.deepcopy(model)
for p in ema.parameters():
    p.requires_grad_(False)
with torch.no_grad():
    for e, p in zip(ema.parameters(), model.parameters()):
        e.mul_(0.9).add_(p, alpha=0.1)
print([p.requires_grad for p in ema.parameters()], ema[0].bias.shape)
""")

snippet("print-model", """\
class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(8),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Dropout2d(0.25),
        )
        self.rnn = nn.LSTM(8, 16, num_layers=2, batch_first=True, bidirectional=True)
        self.emb = nn.Embedding(100, 8, padding_idx=0)
        self.blocks = nn.ModuleList([nn.Linear(32, 32) for _ in range(2)])
        self.heads = nn.ModuleDict({"cls": nn.Linear(32, 10), "reg": nn.Linear(32, 1)})
        self.scale = nn.Parameter(torch.ones(1))
        self.act = nn.GELU(approximate="tanh")
        self.norm = nn.LayerNorm(32, eps=1e-6)
        self.attn = nn.MultiheadAttention(32, 4, batch_first=True)
model = ConvNet()
print(model)
print(nn.Sequential())
print(nn.Identity(), nn.Flatten(), nn.Softmax(dim=1), nn.CrossEntropyLoss(label_smoothing=0.1))
print(sum(p.numel() for p in model.parameters()))
print(sum(p.numel() for p in model.parameters() if p.requires_grad))
print([name for name, _ in model.named_children()])
print(model.heads["cls"])
""")

snippet("print-dtypes", """\
for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.uint8,
              torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128):
    t = torch.tensor([0, 1, 2, 3]).to(dtype)
    print(dtype, t, t.dtype.itemsize, t.element_size(), t.is_floating_point(), t.is_complex())
print(torch.tensor([1.5, -2.25], dtype=torch.float16) * 3)
print(torch.tensor([[1, 2], [3, 4]], dtype=torch.uint8) - 2)
print(torch.tensor(3))
print(torch.tensor(3.5, dtype=torch.float64))
print(torch.tensor([]))
print(torch.zeros(2, 0, 3))
print(torch.tensor([1e-8, 1.0, 1e8]))
print(torch.tensor([1e-4, 1.0]), torch.tensor([123456.0, 1.0]))
print(torch.tensor([float("nan"), float("inf"), -float("inf"), 0.1]))
print(torch.tensor([1 + 2j, -0.5j]))
print(torch.tensor([True, False]) & torch.tensor([True, True]))
print(torch.arange(2000))
print(torch.linspace(0, 1, 5, dtype=torch.float64))
print(torch.ones(2, 2, requires_grad=True) * 2)
print(nn.Parameter(torch.zeros(2)))
print(torch.full((2, 3), 7, dtype=torch.int32).float().mean(dim=0, keepdim=True))
print(repr(torch.tensor([0.1, 0.2])), str(torch.tensor([1.0, 2.0])))
print(torch.tensor([[1.123456789, 2.0]]).tolist(), torch.tensor(2.5).item(), torch.tensor([7]).item())
print(torch.finfo(torch.float16).max, torch.iinfo(torch.int8).min, torch.finfo(torch.bfloat16).eps)
""")

snippet("print-options", """\
torch.set_printoptions(precision=2)
x = torch.tensor([1.23456, 2.34567, 3.0])
print(x)
torch.set_printoptions(sci_mode=True)
print(x)
torch.set_printoptions(profile="default")
print(x)
torch.set_printoptions(threshold=5, edgeitems=2)
print(torch.arange(10))
print(torch.arange(20).reshape(4, 5))
torch.set_printoptions(profile="full")
print(torch.arange(12).reshape(3, 4))
torch.set_printoptions(linewidth=20, profile="default")
print(torch.arange(10.0) / 3)
torch.set_printoptions(profile="default")
print(f"{torch.tensor(1.23456).item():.3f}", f"{torch.tensor([1.5])}")
""")

snippet("seed-determinism", """\
torch.manual_seed(42)
a = torch.randn(3)
torch.manual_seed(42)
b = torch.randn(3)
print(torch.equal(a, b), torch.initial_seed())
g = torch.Generator().manual_seed(7)
c = torch.rand(2, generator=g)
g.manual_seed(7)
print(torch.equal(c, torch.rand(2, generator=g)))
state = torch.get_rng_state()
d = torch.randint(0, 10, (5,))
torch.set_rng_state(state)
print(torch.equal(d, torch.randint(0, 10, (5,))))
torch.manual_seed(0)
print(torch.randperm(6), torch.multinomial(torch.tensor([0.1, 0.2, 0.7]), 4, replacement=True))
torch.manual_seed(0)
drop = nn.Dropout(p=0.5)
m1 = drop(torch.ones(8))
torch.manual_seed(0)
print(torch.equal(m1, drop(torch.ones(8))), m1)
torch.manual_seed(3)
l1 = nn.Linear(3, 2)
torch.manual_seed(3)
l2 = nn.Linear(3, 2)
print(torch.equal(l1.weight, l2.weight))
import random
import numpy as np
random.seed(0)
np.random.seed(0)
print(random.random() == random.Random(0).random(), np.random.rand(2).round(4))
torch.use_deterministic_algorithms(True)
print(torch.are_deterministic_algorithms_enabled())
""")

snippet("warnings-from-torch", """\
import warnings
x = torch.tensor([1.0, 2.0])
y = torch.tensor(x)
print(y)
out = F.mse_loss(torch.ones(3, 1), torch.ones(3))
print(out)
a = torch.ones(2, requires_grad=True)
b = a * 2
print(b.grad)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    torch.tensor(torch.ones(1))
print(len(caught), caught[0].category.__name__)
warnings.filterwarnings("ignore", category=UserWarning)
torch.tensor(x)
print("quiet")
""")

snippet("warnings-deprecated-apis", """\
import warnings
warnings.simplefilter("default")
w = torch.empty(3, 4)
nn.init.xavier_uniform(w)
layer = nn.utils.weight_norm(nn.Linear(4, 2))
print(sorted(n for n, _ in layer.named_parameters()))
print(F.sigmoid(torch.zeros(2)), F.tanh(torch.zeros(1)))
t = torch.ones(2, 3)
print(t.T.shape)
up = F.upsample(torch.ones(1, 1, 2, 2), scale_factor=2)
print(up.shape)
""")

snippet("load-weights-only-refuses-classes", """\
import io
from types import SimpleNamespace
buffer = io.BytesIO()
torch.save({"config": SimpleNamespace(lr=0.1), "weights": torch.ones(2)}, buffer)
buffer.seek(0)
try:
    torch.load(buffer)
except Exception as e:
    print(type(e).__name__, str(e).splitlines()[0][:60])
buffer = io.BytesIO()
torch.save({"config": {"lr": 0.1}, "weights": torch.ones(2), "epoch": 3, "names": ["a", "b"]}, buffer)
buffer.seek(0)
print(torch.load(buffer))
buffer.seek(0)
print(torch.load(buffer, map_location="cpu", weights_only=True)["weights"].device)
""")
