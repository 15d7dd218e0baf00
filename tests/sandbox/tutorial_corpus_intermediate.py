"""The intermediate tutorials: double backward with custom Functions, forward-mode AD, knowledge
distillation, channels-last memory format, saved-tensor hooks that keep what backward needs in
memory buffers (the tutorial's disk variant, through ``torch.save`` to an ``io.BytesIO``)."""

from __future__ import annotations

from tutorial_registry import snippet

snippet("double-backward-function", """\
class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**2
    @staticmethod
    def backward(ctx, grad_out):
        x, = ctx.saved_tensors
        return grad_out * 2 * x
x = torch.rand(3, 3, requires_grad=True, dtype=torch.double)
print(torch.autograd.gradcheck(Square.apply, x), torch.autograd.gradgradcheck(Square.apply, x))
class Exp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        result = torch.exp(x)
        ctx.save_for_backward(result)
        return result
    @staticmethod
    def backward(ctx, grad_out):
        result, = ctx.saved_tensors
        return result * grad_out
x = torch.tensor(1., requires_grad=True, dtype=torch.double).clone()
out = Exp.apply(x)
g, = torch.autograd.grad(out, x, create_graph=True)
gg, = torch.autograd.grad(g, x)
print(round(g.item(), 4), round(gg.item(), 4), g.grad_fn.name())
class Sinh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        expx = torch.exp(x)
        expnegx = torch.exp(-x)
        ctx.save_for_backward(expx, expnegx)
        return (expx - expnegx) / 2, expx, expnegx
    @staticmethod
    def backward(ctx, grad_out, _grad_out_exp, _grad_out_negexp):
        expx, expnegx = ctx.saved_tensors
        grad_input = grad_out * (expx + expnegx) / 2
        grad_input += _grad_out_exp * expx
        grad_input -= _grad_out_negexp * expnegx
        return grad_input
def sinh(x):
    return Sinh.apply(x)[0]
x = torch.rand(3, 3, requires_grad=True, dtype=torch.double)
print(torch.autograd.gradcheck(sinh, x), torch.autograd.gradgradcheck(sinh, x))
""")

snippet("forward-mode-ad-tutorial", """\
import torch.autograd.forward_ad as fwAD
from torch.func import functional_call, jvp
primal = torch.randn(10, 10)
tangent = torch.randn(10, 10)
def fn(x, y):
    return x ** 2 + y ** 2
with fwAD.dual_level():
    dual_input = fwAD.make_dual(primal, tangent)
    print(fwAD.unpack_dual(dual_input).tangent is tangent)
    plain_tensor = torch.randn(10, 10)
    dual_output = fn(dual_input, plain_tensor)
    jvp_result = fwAD.unpack_dual(dual_output).tangent
print(fwAD.unpack_dual(dual_output).tangent is None, torch.allclose(jvp_result, 2 * primal * tangent))
model = nn.Linear(5, 5)
input = torch.randn(16, 5)
params = {name: p for name, p in model.named_parameters()}
tangents = {name: torch.rand_like(p) for name, p in params.items()}
with fwAD.dual_level():
    for name, p in params.items():
        delattr(model, name)
        setattr(model, name, fwAD.make_dual(p, tangents[name]))
    out = model(input)
    jvp_out = fwAD.unpack_dual(out).tangent
print(jvp_out.shape)
model = nn.Linear(5, 5)
func_params = dict(model.named_parameters())
def func(params, input):
    return functional_call(model, params, input)
ones = {k: torch.ones_like(v) for k, v in func_params.items()}
_, jvp_out2 = jvp(lambda p: func(p, input), (func_params,), (ones,))
print(jvp_out2.shape)
class Fn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, foo):
        result = torch.exp(foo)
        ctx.result = result
        return result
    @staticmethod
    def jvp(ctx, gI):
        gO = gI * ctx.result
        del ctx.result
        return gO
fn2 = Fn.apply
primal = torch.randn(10, 10, dtype=torch.double, requires_grad=True)
tangent = torch.randn(10, 10)
with fwAD.dual_level():
    dual_input = fwAD.make_dual(primal, tangent)
    dual_output = fn2(dual_input)
    jvp_output = fwAD.unpack_dual(dual_output).tangent
print(torch.allclose(jvp_output, tangent * primal.exp()))
""")

snippet("knowledge-distillation", """\
torch.manual_seed(0)
teacher = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 3))
student = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 3))
inputs, labels = torch.randn(16, 8), torch.randint(0, 3, (16,))
ce_loss = nn.CrossEntropyLoss()
optimizer = torch.optim.Adam(student.parameters(), lr=0.01)
T, soft_target_loss_weight, ce_loss_weight = 2, 0.25, 0.75
teacher.eval()
student.train()
for epoch in range(3):
    optimizer.zero_grad()
    with torch.no_grad():
        teacher_logits = teacher(inputs)
    student_logits = student(inputs)
    soft_targets = nn.functional.softmax(teacher_logits / T, dim=-1)
    soft_prob = nn.functional.log_softmax(student_logits / T, dim=-1)
    soft_targets_loss = torch.sum(soft_targets * (soft_targets.log() - soft_prob)) / soft_prob.size()[0]
    soft_targets_loss = soft_targets_loss * (T**2)
    label_loss = ce_loss(student_logits, labels)
    loss = soft_target_loss_weight * soft_targets_loss + ce_loss_weight * label_loss
    loss.backward()
    optimizer.step()
    print(f"Epoch {epoch + 1}, Loss: {loss.item():.3f}", teacher_logits.requires_grad)
total = sum(p.numel() for p in teacher.parameters()), sum(p.numel() for p in student.parameters())
print(total)
""")

snippet("channels-last", """\
N, C, H, W = 2, 3, 4, 4
x = torch.empty(N, C, H, W)
print(x.stride())
x = x.to(memory_format=torch.channels_last)
print(x.shape, x.stride(), x.is_contiguous(), x.is_contiguous(memory_format=torch.channels_last))
y = x.contiguous()
print(y.stride(), torch.empty(N, C, H, W, memory_format=torch.channels_last).stride())
model = nn.Conv2d(3, 8, 3).to(memory_format=torch.channels_last)
out = model(torch.randn(N, C, H, W).to(memory_format=torch.channels_last))
print(out.is_contiguous(memory_format=torch.channels_last), model.weight.stride())
z = torch.arange(8.0).reshape(1, 2, 2, 2).contiguous(memory_format=torch.channels_last)
print(z, z.flatten(), z.permute(0, 2, 3, 1).is_contiguous())
""")

snippet("saved-tensor-hooks-memory", """\
import io
def pack_hook(x):
    print("Packing", x.shape)
    return x
def unpack_hook(x):
    print("Unpacking", x.shape)
    return x
a = torch.ones(5, requires_grad=True)
b = torch.ones(5, requires_grad=True) * 2
with torch.autograd.graph.saved_tensors_hooks(pack_hook, unpack_hook):
    y = a * b
y.sum().backward()
print(a.grad)
class SaveToBuffer(torch.autograd.graph.saved_tensors_hooks):
    def __init__(self):
        self.buffers = []
        def pack(tensor):
            buffer = io.BytesIO()
            torch.save(tensor, buffer)
            self.buffers.append(buffer)
            return len(self.buffers) - 1
        def unpack(index):
            buffer = self.buffers[index]
            buffer.seek(0)
            return torch.load(buffer)
        super().__init__(pack, unpack)
x = torch.randn(4, requires_grad=True)
hooks = SaveToBuffer()
with hooks:
    out = (x.exp() * x).sum()
out.backward()
print(len(hooks.buffers), torch.allclose(x.grad, x.exp() * (x + 1)))
""")
