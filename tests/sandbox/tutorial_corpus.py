"""Tutorial-style snippets: code as PyTorch's own docs and tutorials write it (issue 24, 5).

Each must run through the gated sandbox and print exactly what plain torch prints
(``test_tutorial.py``). Floats are printed as torch prints tensors (4 decimals) or rounded, so a
kernel's last bit does not decide a test.
"""

from __future__ import annotations

CORPUS: dict[str, str] = {}


def snippet(name: str, code: str) -> None:
    assert name not in CORPUS, name
    CORPUS[name] = code


# -- a variable named `input`, as torch's docs name it everywhere ---------------------------------

snippet("input-variable", """\
input = torch.randn(3, 5, requires_grad=True)
target = torch.tensor([1, 0, 4])
loss = F.cross_entropy(input, target)
loss.backward()
print(round(loss.item(), 4), input.grad.shape)
""")

snippet("input-keyword", """\
input = torch.tensor([0.5, 1.5])
print(F.mse_loss(input=input, target=torch.ones(2)))
print(torch.sum(input=input))
""")

snippet("forward-hook", """\
model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
seen = []
def hook(module, input, output):
    seen.append((module.__class__.__name__, tuple(input[0].shape), tuple(output.shape)))
handles = [layer.register_forward_hook(hook) for layer in model]
out = model(torch.randn(5, 4))
for h in handles:
    h.remove()
print(seen)
""")

snippet("backward-hook", """\
layer = nn.Linear(3, 2)
grads = {}
def save_grad(module, grad_input, grad_output):
    grads[type(module).__name__] = [g.shape if g is not None else None for g in grad_output]
layer.register_full_backward_hook(save_grad)
layer(torch.ones(4, 3, requires_grad=True)).sum().backward()
print(grads)
""")

snippet("forward-pre-hook", """\
class Scale(nn.Module):
    def forward(self, input):
        return input * 2
m = Scale()
m.register_forward_pre_hook(lambda module, input: (input[0] + 1,))
print(m(torch.zeros(3)))
""")

# -- learning-rate schedulers ---------------------------------------------------------------------

snippet("step-lr", """\
model = nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
for epoch in range(5):
    optimizer.zero_grad()
    loss = model(torch.ones(4, 2)).pow(2).mean()
    loss.backward()
    optimizer.step()
    scheduler.step()
    print(epoch, scheduler.get_last_lr())
""")

snippet("one-cycle-lr", """\
from torch.optim.lr_scheduler import OneCycleLR
model = nn.Linear(3, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
scheduler = OneCycleLR(optimizer, max_lr=0.1, total_steps=6)
lrs = []
for step in range(6):
    optimizer.step()
    lrs.append(round(optimizer.param_groups[0]["lr"], 6))
    scheduler.step()
print(lrs)
""")

snippet("more-schedulers", """\
import torch.optim.lr_scheduler as lr_scheduler
p = [nn.Parameter(torch.ones(1))]
opt = torch.optim.Adam(p, lr=1.0)
sched = lr_scheduler.LambdaLR(opt, lr_lambda=lambda epoch: 0.9 ** epoch)
multi = lr_scheduler.MultiStepLR(torch.optim.SGD(p, lr=1.0), milestones=[1, 2], gamma=0.1)
cosine = lr_scheduler.CosineAnnealingLR(torch.optim.SGD(p, lr=1.0), T_max=4)
plateau = lr_scheduler.ReduceLROnPlateau(torch.optim.SGD(p, lr=1.0), patience=0)
for epoch in range(3):
    opt.step()
    sched.step()
    multi.optimizer.step()
    multi.step()
    cosine.optimizer.step()
    cosine.step()
    plateau.step(1.0)
    print([round(s.get_last_lr()[0], 5) for s in (sched, multi, cosine)], plateau.get_last_lr())
""")

# -- automatic mixed precision ------------------------------------------------------------------

snippet("autocast-cpu", """\
model = nn.Linear(8, 4)
x = torch.randn(2, 8)
with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
    y = model(x)
    z = y.float().sum()
print(y.dtype, z.dtype, torch.is_autocast_enabled("cpu"))
""")

snippet("amp-recipe", """\
device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler(device, enabled=(device == "cuda"))
for step in range(3):
    x = torch.randn(8, 4, device=device)
    with torch.amp.autocast(device_type=device, dtype=torch.bfloat16):
        out = model(x)
        loss = out.float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
print(out.dtype, loss.dtype, scaler.is_enabled())
""")

snippet("grad-scaler-cpu", """\
from torch.amp import GradScaler
w = nn.Parameter(torch.ones(2))
opt = torch.optim.SGD([w], lr=0.1)
scaler = GradScaler("cpu", init_scale=4.0)
loss = (w * 3).sum()
scaler.scale(loss).backward()
print(w.grad)
scaler.step(opt)
scaler.update()
print(w.data, scaler.get_scale())
""")

# -- custom autograd Functions --------------------------------------------------------------------

snippet("once-differentiable", """\
from torch.autograd.function import once_differentiable
class MyReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        return input.clamp(min=0)
    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output):
        input, = ctx.saved_tensors
        grad_input = grad_output.clone()
        grad_input[input < 0] = 0
        return grad_input
x = torch.tensor([-1.0, 2.0, -3.0, 4.0], requires_grad=True)
MyReLU.apply(x).sum().backward()
print(x.grad)
""")

snippet("function-ctx", """\
class Exp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, i):
        result = i.exp()
        ctx.save_for_backward(result)
        return result
    @staticmethod
    def backward(ctx, grad_output):
        result, = ctx.saved_tensors
        return grad_output * result
x = torch.zeros(3, requires_grad=True)
y = Exp.apply(x)
y.sum().backward()
print(y, x.grad, torch.autograd.gradcheck(Exp.apply, torch.zeros(2, dtype=torch.double, requires_grad=True)))
""")

# -- sparse tensors -------------------------------------------------------------------------------

snippet("sparse", """\
i = torch.tensor([[0, 1, 1], [2, 0, 2]])
v = torch.tensor([3.0, 4.0, 5.0])
s = torch.sparse_coo_tensor(i, v, (2, 3))
print(torch.sparse.mm(s, torch.ones(3, 2)))
print(torch.sparse.sum(s), s.to_dense())
""")

# -- backends and devices -------------------------------------------------------------------------

snippet("backend-flags", """\
torch.backends.cudnn.benchmark = True
torch.backends.cudnn.deterministic = False
torch.backends.cuda.matmul.allow_tf32 = True
if torch.cuda.is_available():
    device = torch.device("cuda")
elif torch.backends.mps.is_available():
    device = torch.device("mps")
else:
    device = torch.device("cpu")
print(device, torch.backends.cudnn.benchmark)
""")

snippet("cudnn-alias", """\
import torch.backends.cudnn as cudnn
cudnn.benchmark = True
cudnn.enabled = True
print(cudnn.benchmark, torch.backends.cudnn.is_available())
""")

snippet("accelerator", """\
device = torch.accelerator.current_accelerator().type if torch.accelerator.is_available() else "cpu"
print(f"Using {device} device")
x = torch.ones(2, device=device)
print(x.device)
""")

snippet("device-idiom", """\
device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
net = nn.Linear(2, 2).to(device)
inputs = torch.ones(1, 2).to(device)
print(device, net(inputs).shape, torch.cuda.device_count())
""")

# -- torch.testing, swa_utils, pruning, parameters ---------------------------------------------

snippet("assert-close", """\
a = torch.tensor([1.0, 2.0])
torch.testing.assert_close(a, a + 1e-7)
try:
    torch.testing.assert_close(a, a + 1)
except AssertionError as e:
    print(str(e).splitlines()[0])
""")

snippet("swa", """\
from torch.optim.swa_utils import AveragedModel, SWALR
model = nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
swa_model = AveragedModel(model)
swa_scheduler = SWALR(opt, swa_lr=0.05, anneal_epochs=2)
for i in range(3):
    opt.zero_grad()
    model(torch.ones(2, 3)).sum().backward()
    opt.step()
    swa_model.update_parameters(model)
    swa_scheduler.step()
print(swa_model.n_averaged.item(), [round(lr, 4) for lr in swa_scheduler.get_last_lr()])
""")

snippet("prune", """\
import torch.nn.utils.prune as prune
m = nn.Linear(4, 2)
prune.l1_unstructured(m, name="weight", amount=0.5)
print([name for name, _ in m.named_buffers()], int((m.weight == 0).sum()))
prune.remove(m, "weight")
print([name for name, _ in m.named_parameters()])
""")

snippet("parameter", """\
from torch.nn.parameter import Parameter
class MyLinear(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = Parameter(torch.ones(out_features, in_features))
        self.bias = Parameter(torch.zeros(out_features))
    def forward(self, input):
        return input @ self.weight.t() + self.bias
m = MyLinear(3, 2)
print(m(torch.ones(1, 3)), [n for n, _ in m.named_parameters()])
""")

# -- the name-classification and seq2seq tutorials' text handling --------------------------------

snippet("char-rnn-data", """\
from __future__ import unicode_literals, print_function, division
import unicodedata
import string
all_letters = string.ascii_letters + " .,;'"
n_letters = len(all_letters)
def unicodeToAscii(s):
    return ''.join(
        c for c in unicodedata.normalize('NFD', s)
        if unicodedata.category(c) != 'Mn'
        and c in all_letters
    )
print(unicodeToAscii('Ślusàrski'))
def letterToTensor(letter):
    tensor = torch.zeros(1, n_letters)
    tensor[0][all_letters.find(letter)] = 1
    return tensor
def lineToTensor(line):
    tensor = torch.zeros(len(line), 1, n_letters)
    for li, letter in enumerate(line):
        tensor[li][0][all_letters.find(letter)] = 1
    return tensor
print(letterToTensor('J').nonzero())
print(lineToTensor('Jones').size())
""")

snippet("char-rnn-model", """\
import string
n_letters = len(string.ascii_letters)
class RNN(nn.Module):
    def __init__(self, input_size, hidden_size, output_size):
        super(RNN, self).__init__()
        self.hidden_size = hidden_size
        self.i2h = nn.Linear(input_size, hidden_size)
        self.h2h = nn.Linear(hidden_size, hidden_size)
        self.h2o = nn.Linear(hidden_size, output_size)
        self.softmax = nn.LogSoftmax(dim=1)
    def forward(self, input, hidden):
        hidden = F.tanh(self.i2h(input) + self.h2h(hidden))
        output = self.softmax(self.h2o(hidden))
        return output, hidden
    def initHidden(self):
        return torch.zeros(1, self.hidden_size)
rnn = RNN(n_letters, 8, 3)
input = torch.zeros(1, n_letters)
input[0][3] = 1
output, next_hidden = rnn(input, rnn.initHidden())
print(output.shape, next_hidden.shape, output.exp().sum().round())
""")

snippet("seq2seq-normalize", """\
import re
import unicodedata
def unicodeToAscii(s):
    return ''.join(c for c in unicodedata.normalize('NFD', s) if unicodedata.category(c) != 'Mn')
def normalizeString(s):
    s = unicodeToAscii(s.lower().strip())
    s = re.sub(r"([.!?])", r" \\1", s)
    s = re.sub(r"[^a-zA-Z!?]+", r" ", s)
    return s.strip()
print(normalizeString("Va, maintenant!  Ça va?"))
""")

# -- DCGAN, classes and names ---------------------------------------------------------------------

snippet("dcgan-weights-init", """\
def weights_init(m):
    classname = m.__class__.__name__
    if classname.find('Conv') != -1:
        nn.init.normal_(m.weight.data, 0.0, 0.02)
    elif classname.find('BatchNorm') != -1:
        nn.init.normal_(m.weight.data, 1.0, 0.02)
        nn.init.constant_(m.bias.data, 0)
netG = nn.Sequential(nn.ConvTranspose2d(4, 8, 4, 1, 0, bias=False), nn.BatchNorm2d(8), nn.ReLU(True))
netG.apply(weights_init)
print(netG[1].bias.data, netG[0].weight.shape)
print(netG)
""")

snippet("dcgan-training-step", """\
from __future__ import print_function
import random
import torch.nn.parallel
import torch.optim as optim
import torch.utils.data
manualSeed = 999
random.seed(manualSeed)
torch.manual_seed(manualSeed)
torch.use_deterministic_algorithms(True)
nz, ngf, ndf, nc = 4, 4, 4, 1
def weights_init(m):
    classname = m.__class__.__name__
    if classname.find('Conv') != -1:
        nn.init.normal_(m.weight.data, 0.0, 0.02)
    elif classname.find('BatchNorm') != -1:
        nn.init.normal_(m.weight.data, 1.0, 0.02)
        nn.init.constant_(m.bias.data, 0)
class Generator(nn.Module):
    def __init__(self, ngpu):
        super(Generator, self).__init__()
        self.ngpu = ngpu
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 2, 4, 1, 0, bias=False),
            nn.BatchNorm2d(ngf * 2),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, nc, 4, 2, 1, bias=False),
            nn.Tanh()
        )
    def forward(self, input):
        return self.main(input)
class Discriminator(nn.Module):
    def __init__(self, ngpu):
        super(Discriminator, self).__init__()
        self.main = nn.Sequential(
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf, 1, 4, 1, 0, bias=False),
            nn.Sigmoid()
        )
    def forward(self, input):
        return self.main(input)
device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
netG = Generator(0).to(device)
if (device.type == 'cuda') and (ngpu > 1):
    netG = nn.DataParallel(netG, list(range(ngpu)))
netG.apply(weights_init)
netD = Discriminator(0).to(device)
netD.apply(weights_init)
criterion = nn.BCELoss()
fixed_noise = torch.randn(2, nz, 1, 1, device=device)
real_label, fake_label = 1., 0.
optimizerD = optim.Adam(netD.parameters(), lr=0.0002, betas=(0.5, 0.999))
optimizerG = optim.Adam(netG.parameters(), lr=0.0002, betas=(0.5, 0.999))
real_cpu = torch.randn(2, nc, 8, 8)
b_size = real_cpu.size(0)
netD.zero_grad()
label = torch.full((b_size,), real_label, dtype=torch.float, device=device)
output = netD(real_cpu).view(-1)
errD_real = criterion(output, label)
errD_real.backward()
noise = torch.randn(b_size, nz, 1, 1, device=device)
fake = netG(noise)
label.fill_(fake_label)
output = netD(fake.detach()).view(-1)
errD_fake = criterion(output, label)
errD_fake.backward()
errD = errD_real + errD_fake
optimizerD.step()
netG.zero_grad()
label.fill_(real_label)
output = netD(fake).view(-1)
errG = criterion(output, label)
errG.backward()
optimizerG.step()
with torch.no_grad():
    f = netG(fixed_noise).detach().cpu()
print('Loss_D: %.4f\\tLoss_G: %.4f' % (errD.item(), errG.item()), f.shape)
""")

# The CIFAR-10 tutorial's loader: worker processes, which the sandbox cannot start, load in-process
# (app.engine.workers) and give the same batches.
snippet("dataloader-workers", """\
from torch.utils.data import DataLoader, TensorDataset
ds = TensorDataset(torch.arange(8.).unsqueeze(1), torch.arange(8) % 2)
trainloader = DataLoader(ds, batch_size=4, shuffle=True, num_workers=2)
model = nn.Linear(1, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
for epoch in range(2):
    running_loss = 0.0
    for i, data in enumerate(trainloader, 0):
        inputs, labels = data
        optimizer.zero_grad()
        loss = F.cross_entropy(model(inputs), labels)
        loss.backward()
        optimizer.step()
        running_loss += loss.item()
        print(epoch, i, labels.tolist())
print(trainloader.num_workers, len(trainloader))
kept = DataLoader(ds, batch_size=3, num_workers=1, persistent_workers=True, drop_last=True)
for _ in range(2):
    print([batch[1].tolist() for batch in kept])
""")

snippet("cpu-amp-autocast", """\
model = nn.Linear(4, 2)
with torch.cpu.amp.autocast():
    out = model(torch.ones(3, 4))
print(out.dtype, torch.cpu.is_available())
""")

snippet("class-names", """\
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)
    def __repr__(self):
        return f"{self.__class__.__name__}(fc={self.fc.out_features})"
net = Net()
print(net, type(net).__name__, type(net.fc).__qualname__, F.relu.__name__)
print(type(1.5), type(torch.ones(1)))
""")

snippet("annotations", """\
from typing import List, Optional, Tuple
from torch import Tensor
class Block(nn.Module):
    def __init__(self, dim: int, hidden: Optional[int] = None) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, hidden or dim)
    def forward(self, input: Tensor) -> Tensor:
        return self.fc(input).relu()
def shape_of(xs: List[Tensor]) -> Tuple[int, ...]:
    return tuple(torch.stack(xs).shape)
print(shape_of([Block(3)(torch.ones(3)) for _ in range(2)]))
""")

snippet("annotations-future", """\
from __future__ import annotations
class Node:
    def __init__(self, value: float, parent: Node | None = None) -> None:
        self.value = value
        self.parent = parent
    def root(self) -> Node:
        return self if self.parent is None else self.parent.root()
print(Node(2.0, Node(1.0)).root().value)
""")

snippet("annotation-forward-name", """\
class Trainer:
    def model(self) -> Net:
        return Net()
""")

snippet("dataclass-config", """\
from dataclasses import dataclass, field
@dataclass
class Config:
    lr: float = 1e-3
    hidden: int = 16
    layers: list = field(default_factory=lambda: [4, 4])
cfg = Config(lr=0.01)
print(cfg, cfg.layers)
""")

# -- training loops as the tutorials write them ---------------------------------------------------

snippet("quickstart", """\
from torch.utils.data import DataLoader, TensorDataset
device = torch.accelerator.current_accelerator().type if torch.accelerator.is_available() else "cpu"
class NeuralNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.linear_relu_stack = nn.Sequential(
            nn.Linear(4 * 4, 8),
            nn.ReLU(),
            nn.Linear(8, 3),
        )
    def forward(self, x):
        x = self.flatten(x)
        logits = self.linear_relu_stack(x)
        return logits
model = NeuralNetwork().to(device)
print(model)
data = TensorDataset(torch.randn(12, 4, 4), torch.tensor([0, 1, 2] * 4))
dataloader = DataLoader(data, batch_size=4)
loss_fn = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=1e-1)
def train(dataloader, model, loss_fn, optimizer):
    size = len(dataloader.dataset)
    model.train()
    for batch, (X, y) in enumerate(dataloader):
        X, y = X.to(device), y.to(device)
        pred = model(X)
        loss = loss_fn(pred, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if batch % 2 == 0:
            loss, current = loss.item(), (batch + 1) * len(X)
            print(f"loss: {loss:>7f}  [{current:>5d}/{size:>5d}]")
def test(dataloader, model, loss_fn):
    model.eval()
    correct = 0
    with torch.no_grad():
        for X, y in dataloader:
            pred = model(X.to(device))
            correct += (pred.argmax(1) == y.to(device)).type(torch.float).sum().item()
    print(f"Accuracy: {(100 * correct / len(dataloader.dataset)):>0.1f}%")
for t in range(2):
    print(f"Epoch {t+1}")
    train(dataloader, model, loss_fn, optimizer)
    test(dataloader, model, loss_fn)
""")

snippet("custom-dataset", """\
from torch.utils.data import Dataset, DataLoader
from torch.utils.data.sampler import SequentialSampler, BatchSampler
class Squares(Dataset):
    def __init__(self, n):
        self.n = n
    def __len__(self):
        return self.n
    def __getitem__(self, idx):
        x = torch.tensor([float(idx)])
        return x, x ** 2
loader = DataLoader(Squares(6), batch_sampler=BatchSampler(SequentialSampler(range(6)), 4, False))
for xb, yb in loader:
    print(xb.squeeze(1).tolist(), yb.squeeze(1).tolist())
""")

snippet("timing-a-loop", """\
import time
start = time.time()
t0 = time.perf_counter()
x = torch.ones(100)
for _ in range(10):
    x = x * 1.01
elapsed = time.time() - start
print(elapsed >= 0, time.perf_counter() >= t0, round(x.sum().item(), 2))
""")

snippet("warnings-ignored", """\
import warnings
warnings.filterwarnings("ignore")
x = torch.ones(2, 2)
print(F.softmax(x).sum())
with warnings.catch_warnings():
    warnings.simplefilter("ignore", category=UserWarning)
    print(F.log_softmax(x).shape)
""")

snippet("lstm", """\
lstm = nn.LSTM(3, 3)
inputs = [torch.randn(1, 3) for _ in range(5)]
hidden = (torch.randn(1, 1, 3), torch.randn(1, 1, 3))
for i in inputs:
    out, hidden = lstm(i.view(1, 1, -1), hidden)
inputs = torch.cat(inputs).view(len(inputs), 1, -1)
out, hidden = lstm(inputs, hidden)
print(out.shape, hidden[0].shape)
""")

snippet("autograd-basics", """\
x = torch.ones(5)
y = torch.zeros(3)
w = torch.randn(5, 3, requires_grad=True)
b = torch.randn(3, requires_grad=True)
z = torch.matmul(x, w) + b
loss = torch.nn.functional.binary_cross_entropy_with_logits(z, y)
print(f"Gradient function for z = {z.grad_fn.name()}")
print(f"Gradient function for loss = {type(loss.grad_fn).__name__}")
loss.backward()
print(w.grad.shape, b.grad.shape)
with torch.no_grad():
    z = torch.matmul(x, w) + b
print(z.requires_grad, z.detach().requires_grad)
inp = torch.eye(4, 5, requires_grad=True)
out = (inp + 1).pow(2).t()
out.backward(torch.ones_like(out), retain_graph=True)
print(f"First call\\n{inp.grad}")
""")

snippet("jacobian", """\
from torch.autograd.functional import jacobian
def exp_reducer(x):
    return x.exp().sum(dim=1)
inputs = torch.zeros(2, 2)
print(jacobian(exp_reducer, inputs))
""")

snippet("func-transforms", """\
from torch.func import vmap, jacrev
print(vmap(torch.dot)(torch.ones(3, 2), torch.ones(3, 2)))
print(jacrev(torch.sin)(torch.zeros(2)))
""")

snippet("tensor-hooks", """\
v = torch.tensor([0.0, 0.0, 0.0], requires_grad=True)
h = v.register_hook(lambda grad: grad * 2)
v.backward(torch.tensor([1.0, 2.0, 3.0]))
print(v.grad)
h.remove()
""")

snippet("clip-and-init", """\
model = nn.Linear(4, 4)
nn.init.xavier_uniform_(model.weight)
nn.init.zeros_(model.bias)
loss = model(torch.ones(2, 4) * 100).pow(2).sum()
loss.backward()
total = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
norm = torch.cat([p.grad.flatten() for p in model.parameters()]).norm()
print(round(norm.item(), 4), total > 1)
""")

snippet("ordered-dict-model", """\
from collections import OrderedDict
model = nn.Sequential(OrderedDict([
    ('conv1', nn.Conv2d(1, 2, 3)),
    ('relu1', nn.ReLU()),
]))
print(model, model.conv1.weight.shape)
print(model(torch.ones(1, 1, 4, 4)).shape)
""")

snippet("global-counter", """\
calls = 0
def counted(x):
    global calls
    calls += 1
    return x * 2
for _ in range(3):
    counted(torch.ones(1))
print(calls)
""")

snippet("inference-mode", """\
model = nn.Linear(2, 2)
model.eval()
with torch.inference_mode():
    out = model(torch.ones(1, 2))
print(out.requires_grad, out.is_inference(), model.training)
""")

snippet("gc-after-del", """\
import gc
kept = [torch.ones(1000, requires_grad=True) * 2 for _ in range(3)]
del kept
gc.collect()
print(gc.get_count()[0] >= 0, torch.ones(2))
""")

snippet("sdpa-kernel", """\
from torch.nn.attention import SDPBackend, sdpa_kernel
q = k = v = torch.ones(1, 2, 4, 8)
with sdpa_kernel(SDPBackend.MATH):
    out = F.scaled_dot_product_attention(q, k, v)
print(out.shape, out.sum())
""")

snippet("type-checks", """\
x = torch.ones(2)
print(isinstance(x, torch.Tensor), type(x) is torch.Tensor, isinstance(nn.Linear, type))
print(type(x).__name__, type(3).__name__)
""")
