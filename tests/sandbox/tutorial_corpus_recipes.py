"""Recipes: transfer learning (no download), distributions, packed sequences, checkpointing,
parametrizations, torch.func, torch.testing, swa_utils and schedulers; the standard library's helpers
as tutorials import them."""

from __future__ import annotations

from tutorial_registry import snippet

# -- recipes ---------------------------------------------------------------------------------------

snippet("transfer-learning", """\
import copy
import time
from torch.optim import lr_scheduler
model_ft = nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 10))
for param in model_ft.parameters():
    param.requires_grad = False
num_ftrs = model_ft[3].in_features
model_ft[3] = nn.Linear(num_ftrs, 2)
criterion = nn.CrossEntropyLoss()
optimizer_ft = torch.optim.SGD(model_ft[3].parameters(), lr=0.001, momentum=0.9)
exp_lr_scheduler = lr_scheduler.StepLR(optimizer_ft, step_size=7, gamma=0.1)
dataloaders = {"train": [(torch.randn(4, 3, 8, 8), torch.tensor([0, 1, 0, 1]))],
               "val": [(torch.randn(4, 3, 8, 8), torch.tensor([1, 1, 0, 0]))]}
dataset_sizes = {"train": 4, "val": 4}
def train_model(model, criterion, optimizer, scheduler, num_epochs=2):
    since = time.time()
    best_model_wts = copy.deepcopy(model.state_dict())
    best_acc = 0.0
    for epoch in range(num_epochs):
        print(f'Epoch {epoch}/{num_epochs - 1}')
        print('-' * 10)
        for phase in ['train', 'val']:
            if phase == 'train':
                model.train()
            else:
                model.eval()
            running_loss = 0.0
            running_corrects = 0
            for inputs, labels in dataloaders[phase]:
                optimizer.zero_grad()
                with torch.set_grad_enabled(phase == 'train'):
                    outputs = model(inputs)
                    _, preds = torch.max(outputs, 1)
                    loss = criterion(outputs, labels)
                    if phase == 'train':
                        loss.backward()
                        optimizer.step()
                running_loss += loss.item() * inputs.size(0)
                running_corrects += torch.sum(preds == labels.data)
            if phase == 'train':
                scheduler.step()
            epoch_loss = running_loss / dataset_sizes[phase]
            epoch_acc = running_corrects.double() / dataset_sizes[phase]
            print(f'{phase} Loss: {epoch_loss:.4f} Acc: {epoch_acc:.4f}')
            if phase == 'val' and epoch_acc > best_acc:
                best_acc = epoch_acc
                best_model_wts = copy.deepcopy(model.state_dict())
    time_elapsed = time.time() - since
    print(f'Training complete in {time_elapsed // 60:.0f}m')
    model.load_state_dict(best_model_wts)
    return model
model_ft = train_model(model_ft, criterion, optimizer_ft, exp_lr_scheduler)
print(sum(p.requires_grad for p in model_ft.parameters()))
""")

snippet("distributions-reinforce", """\
from torch.distributions import Categorical, Normal
probs = torch.tensor([0.2, 0.8])
m = Categorical(probs)
action = m.sample()
print(action, m.log_prob(action))
policy = nn.Linear(4, 2)
state = torch.ones(1, 4)
p = F.softmax(policy(state), dim=1)
dist = Categorical(p)
a = dist.sample()
loss = -dist.log_prob(a) * 1.5
loss.backward()
print(policy.bias.grad.shape, a.item() in (0, 1))
n = Normal(torch.tensor([0.0]), torch.tensor([1.0]))
print(n.sample(), n.entropy(), n.rsample().requires_grad)
""")

snippet("packed-sequences", """\
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence
seqs = [torch.ones(3, 2), torch.ones(2, 2), torch.ones(1, 2)]
lengths = torch.tensor([3, 2, 1])
padded = pad_sequence(seqs, batch_first=True)
packed = pack_padded_sequence(padded, lengths, batch_first=True)
rnn = nn.GRU(2, 4, batch_first=True)
out, h = rnn(packed)
unpacked, lens = pad_packed_sequence(out, batch_first=True)
print(padded.shape, packed.batch_sizes, unpacked.shape, lens, h.shape)
""")

snippet("checkpoint-tutorial", """\
from torch.utils.checkpoint import checkpoint, checkpoint_sequential
model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4), nn.ReLU())
x = torch.randn(2, 4, requires_grad=True)
out = checkpoint(model, x, use_reentrant=False)
out.sum().backward()
print(x.grad.shape)
out2 = checkpoint_sequential(model, 2, x, use_reentrant=False)
out2.sum().backward()
print(out2.shape)
""")

snippet("parametrizations", """\
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import orthogonal, weight_norm
class Symmetric(nn.Module):
    def forward(self, X):
        return X.triu() + X.triu(1).transpose(-1, -2)
layer = nn.Linear(3, 3)
parametrize.register_parametrization(layer, "weight", Symmetric())
A = layer.weight
print(torch.allclose(A, A.T))
print(layer)
q = orthogonal(nn.Linear(3, 3))
Q = q.weight
print(torch.dist(Q.T @ Q, torch.eye(3)) < 1e-5)
w = weight_norm(nn.Linear(2, 2))
print(sorted(n for n, _ in w.named_parameters()))
""")

snippet("func-api", """\
from torch.func import grad, vmap, functional_call, jacrev, hessian
def f(x):
    return x.sin().sum()
x = torch.randn(3)
print(torch.allclose(grad(f)(x), x.cos()))
model = nn.Linear(3, 1)
params = {k: v.detach() for k, v in model.named_parameters()}
def loss_fn(params, x):
    return functional_call(model, params, (x,)).sum()
grads = grad(loss_fn)(params, torch.ones(2, 3))
print({k: tuple(v.shape) for k, v in grads.items()})
print(hessian(f)(torch.zeros(2)))
batched = vmap(grad(f))(torch.zeros(4, 3))
print(batched.shape)
""")

snippet("testing-helpers", """\
from torch.testing import make_tensor, assert_close
t = make_tensor((2, 3), device="cpu", dtype=torch.float32, low=-1, high=1)
print(t.shape, t.dtype, bool((t >= -1).all()))
assert_close(torch.tensor(1.0), torch.tensor(1.0 + 1e-7))
try:
    assert_close(torch.tensor([1, 2]), torch.tensor([1.0, 2.0]))
except Exception as e:
    print(type(e).__name__, str(e).splitlines()[0])
torch.testing.assert_close(torch.ones(2), torch.ones(2), rtol=0, atol=0)
print("ok")
""")

snippet("swa-update-bn", """\
from torch.optim.swa_utils import AveragedModel, SWALR, update_bn, get_ema_multi_avg_fn
from torch.utils.data import DataLoader, TensorDataset
model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 1))
loader = DataLoader(TensorDataset(torch.randn(8, 3)), batch_size=4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=4)
swa_model = AveragedModel(model)
swa_start = 1
swa_scheduler = SWALR(optimizer, swa_lr=0.05)
for epoch in range(3):
    for (input,) in loader:
        optimizer.zero_grad()
        model(input).pow(2).mean().backward()
        optimizer.step()
    if epoch > swa_start:
        swa_model.update_parameters(model)
        swa_scheduler.step()
    else:
        scheduler.step()
update_bn(loader, swa_model)
print(swa_model.n_averaged, swa_model.module[1].running_mean.shape)
ema_model = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999))
ema_model.update_parameters(model)
print(ema_model.n_averaged)
""")

snippet("schedulers-more", """\
from torch.optim.lr_scheduler import (LambdaLR, SequentialLR, ConstantLR, ExponentialLR,
    CosineAnnealingWarmRestarts, ChainedScheduler, LinearLR, CyclicLR, PolynomialLR)
model = nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
lam = LambdaLR(opt, lr_lambda=lambda epoch: 0.95 ** epoch)
print(lam.get_last_lr())
opt2 = torch.optim.SGD(model.parameters(), lr=1.0)
seq = SequentialLR(opt2, schedulers=[ConstantLR(opt2, factor=0.1, total_iters=2),
                                     ExponentialLR(opt2, gamma=0.9)], milestones=[2])
opt3 = torch.optim.SGD(model.parameters(), lr=1.0)
warm = CosineAnnealingWarmRestarts(opt3, T_0=2)
opt4 = torch.optim.SGD(model.parameters(), lr=1.0)
chained = ChainedScheduler([LinearLR(opt4, start_factor=0.5, total_iters=2), ExponentialLR(opt4, gamma=0.9)])
opt5 = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
cyc = CyclicLR(opt5, base_lr=0.01, max_lr=0.1, step_size_up=2)
opt6 = torch.optim.Adam(model.parameters(), lr=0.1)
poly = PolynomialLR(opt6, total_iters=4, power=1.0)
for i in range(4):
    for o in (opt, opt2, opt3, opt4, opt5, opt6):
        o.step()
    for sc in (lam, seq, warm, chained, cyc, poly):
        sc.step()
    print([round(sc.get_last_lr()[0], 4) for sc in (lam, seq, warm, chained, cyc, poly)])
print(lam.state_dict()["last_epoch"])
""")

# -- the standard library as tutorials import it ---------------------------------------------------

snippet("stdlib-imports", """\
from collections import namedtuple, defaultdict, Counter, deque, OrderedDict
from itertools import count, chain, islice, product, accumulate, combinations
from functools import partial, reduce, lru_cache, wraps
from typing import NamedTuple, Dict, Callable, Any, Union, Iterable, Sequence
import dataclasses
import random
Transition = namedtuple('Transition', ('state', 'action', 'next_state', 'reward'))
class ReplayMemory(object):
    def __init__(self, capacity):
        self.memory = deque([], maxlen=capacity)
    def push(self, *args):
        self.memory.append(Transition(*args))
    def sample(self, batch_size):
        return random.sample(self.memory, batch_size)
    def __len__(self):
        return len(self.memory)
memory = ReplayMemory(3)
for i in count():
    memory.push(torch.tensor([i]), i, None, 1.0)
    if i == 4:
        break
print(len(memory), [t.action for t in memory.sample(2)])
batch = Transition(*zip(*memory.memory))
print(batch.action, torch.cat(batch.state))
class Point(NamedTuple):
    x: float
    y: float = 0.0
print(Point(1.0), Counter("hello").most_common(1), dict(defaultdict(int, a=1)))
print(list(islice(chain([1, 2], [3]), 2)), list(product([0, 1], repeat=2))[:2], list(accumulate([1, 2, 3])))
relu6 = partial(F.hardtanh, min_val=0., max_val=6.)
print(relu6(torch.tensor([-1., 7.])), reduce(lambda a, b: a * b, [1, 2, 3]))
@lru_cache(maxsize=None)
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
def logged(fn):
    @wraps(fn)
    def inner(*a, **k):
        return fn(*a, **k)
    return inner
@logged
def add(a, b):
    return a + b
print(fib(10), add.__name__, add(1, 2), list(combinations(range(3), 2)))
@dataclasses.dataclass(frozen=True)
class HParams:
    lr: float = 0.1
print(dataclasses.asdict(HParams()), dataclasses.replace(HParams(), lr=0.2))
""")

snippet("other-stdlib", """\
import abc
import json
import operator
import statistics
import heapq
import bisect
import pprint
import textwrap
import numbers
print("imported")
""")

snippet("abc-only", """\
from abc import ABC, abstractmethod
class Base(ABC):
    @abstractmethod
    def forward(self, x): ...
class Impl(Base):
    def forward(self, x):
        return x * 2
print(Impl().forward(torch.ones(1)))
""")

snippet("json-only", """\
import json
config = json.loads('{"lr": 0.1, "layers": [4, 4]}')
print(config["lr"], json.dumps(config, sort_keys=True))
""")

snippet("main-guard", """\
def main():
    x = torch.ones(2)
    print(x * 2)
if __name__ == "__main__":
    main()
""")


# -- submodules tutorials import from, a custom optimizer, accelerator checks ----------------------

snippet("submodule-imports", """\
from torch.distributions.normal import Normal
from torch.distributions.categorical import Categorical
from torch.distributions.kl import kl_divergence
from torch.distributions.multivariate_normal import MultivariateNormal
from torch.utils.data.dataset import Dataset
from torch.utils.data.dataloader import DataLoader, default_collate
from torch.utils.hooks import RemovableHandle
p, q = Normal(0.0, 1.0), Normal(1.0, 2.0)
print(kl_divergence(p, q), Categorical(logits=torch.zeros(3)).entropy())
mvn = MultivariateNormal(torch.zeros(2), torch.eye(2))
print(mvn.log_prob(torch.zeros(2)))
class Pairs(Dataset):
    def __len__(self):
        return 3
    def __getitem__(self, i):
        return torch.tensor([i, i * i])
print(next(iter(DataLoader(Pairs(), batch_size=3))), default_collate([1, 2]))
h = torch.ones(1, requires_grad=True).register_hook(lambda g: g)
print(isinstance(h, RemovableHandle))
""")

snippet("custom-optimizer", """\
from torch.optim.optimizer import Optimizer
class PlainSGD(Optimizer):
    def __init__(self, params, lr=0.1):
        defaults = dict(lr=lr)
        super().__init__(params, defaults)
    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                state["steps"] = state.get("steps", 0) + 1
                p.add_(p.grad, alpha=-group["lr"])
        return loss
model = nn.Linear(2, 1)
opt = PlainSGD(model.parameters(), lr=0.5)
for _ in range(3):
    opt.zero_grad()
    loss = model(torch.ones(4, 2)).pow(2).mean()
    loss.backward()
    opt.step()
print(round(loss.item(), 4), opt.state[model.weight]["steps"], opt)
""")

snippet("device-selection-xpu", """\
if torch.cuda.is_available():
    device = torch.device("cuda")
elif torch.backends.mps.is_available():
    device = torch.device("mps")
elif torch.xpu.is_available():
    device = torch.device("xpu")
else:
    device = torch.device("cpu")
print(device, torch.xpu.device_count())
""")

snippet("stateless-call", """\
from torch.nn.utils.stateless import functional_call
m = nn.Linear(2, 1)
out = functional_call(m, {"weight": torch.ones(1, 2), "bias": torch.zeros(1)}, (torch.ones(1, 2),))
print(out)
""")

snippet("masked-tensor", """\
from torch.masked import masked_tensor
data = torch.arange(4.0)
mask = torch.tensor([True, False, True, False])
mt = masked_tensor(data, mask)
print(mt.sum())
""")
