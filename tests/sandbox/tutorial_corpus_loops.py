"""Tutorial code as whole programs: DCGAN, classes and annotations, training loops, datasets, timing,
warnings, hooks, stdlib idioms."""

from __future__ import annotations

from tutorial_registry import snippet

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
