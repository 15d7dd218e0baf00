"""Tutorial code the gate used to refuse (issue 24, 5): ``input`` as a name, schedulers, AMP, custom
Functions, sparse tensors, backends, torch.testing, swa_utils, the text tutorials."""

from __future__ import annotations

from tutorial_registry import snippet

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
