"""What tutorials print of torch's objects: an optimizer, its and a model's ``state_dict``, a
scheduler's, a distribution, sizes, devices, dtypes, a ``PackedSequence``, ``torch.return_types``, and
tensors with a gradient function."""

from __future__ import annotations

from tutorial_registry import snippet

snippet("print-training-objects", """\
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
print(optimizer)
model(torch.randn(4, 2)).sum().backward()
optimizer.step()
print(model.state_dict())
state = optimizer.state_dict()
print(state["param_groups"])
shapes = {k: {n: (v.shape if torch.is_tensor(v) else v) for n, v in s.items()}
          for k, s in state["state"].items()}
print(shapes)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
print(scheduler.state_dict())
print(torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1, momentum=0.9, nesterov=True))
""")

snippet("print-small-objects", """\
from torch.nn.utils.rnn import pack_sequence
print(torch.Size([2, 3]), torch.ones(2, 3).size(), torch.ones(2, 3).shape[1:], torch.Size([]))
print(torch.device("cpu"), torch.device("cuda", 0), torch.device("cpu").type, repr(torch.device("cpu")))
print(torch.float32, torch.int64, repr(torch.bfloat16), torch.float32.is_floating_point,
      torch.long == torch.int64)
print(torch.max(torch.tensor([[1, 5], [7, 2]]), dim=1))
print(torch.sort(torch.tensor([3, 1])), torch.linalg.eigh(torch.eye(2)).eigenvalues)
print(pack_sequence([torch.tensor([1, 2, 3]), torch.tensor([4, 5])]))
print(torch.distributions.Normal(torch.zeros(2), torch.ones(2)),
      torch.distributions.Categorical(probs=torch.ones(3) / 3))
print(torch.finfo(torch.float32), torch.iinfo(torch.int16))
x = torch.ones(2, requires_grad=True)
print(x * 2, (x * 2).sum(), x.mean().unsqueeze(0), x[0], x.detach(), x.data)
print(torch.nn.Parameter(torch.ones(1)), nn.ParameterList([nn.Parameter(torch.ones(1))]))
print(torch.ones(2, 2).to_sparse(), torch.zeros(0))
""")

snippet("warnings-in-loops", """\
import warnings
x = torch.randn(2, 3)
for epoch in range(3):
    p = F.softmax(x)
    t = torch.tensor(p)
    F.mse_loss(torch.ones(2, 1), torch.ones(2))
def helper(i):
    warnings.warn(f"call {i}")
    warnings.warn("same text")
for i in range(2):
    helper(i)
warnings.warn("deprecated here", DeprecationWarning)
def old_api():
    warnings.warn("old", DeprecationWarning, stacklevel=2)
old_api()
old_api()
warnings.warn("future", FutureWarning)
print("done")
""")
