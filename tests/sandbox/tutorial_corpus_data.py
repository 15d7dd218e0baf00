"""Data loading as the docs write it: worker processes (each its own random state, worker info and
turn; an iterable dataset split across workers; persistent workers; a worker's error), seeding
workers for reproducibility, random_split, Subset, ConcatDataset and samplers."""

from __future__ import annotations

from tutorial_registry import snippet

# -- DataLoader workers, loaded in-process as the workers would load them --------------------------

snippet("loader-random-getitem-workers", """\
from torch.utils.data import Dataset, DataLoader
import random
import numpy as np
class Aug(Dataset):
    def __len__(self):
        return 8
    def __getitem__(self, i):
        return torch.rand(1).item(), random.random(), i
loader = DataLoader(Aug(), batch_size=2, num_workers=2)
for epoch in range(2):
    for a, b, i in loader:
        print(epoch, [round(v, 4) for v in a.tolist()], [round(v, 4) for v in b.tolist()], i.tolist())
""")

snippet("loader-seed-worker", """\
from torch.utils.data import DataLoader, TensorDataset
import numpy
import random
def seed_worker(worker_id):
    worker_seed = torch.initial_seed() % 2**32
    numpy.random.seed(worker_seed)
    random.seed(worker_seed)
g = torch.Generator()
g.manual_seed(0)
class Noisy(torch.utils.data.Dataset):
    def __len__(self):
        return 6
    def __getitem__(self, i):
        return i, float(numpy.random.rand())
loader = DataLoader(Noisy(), batch_size=2, num_workers=2, worker_init_fn=seed_worker, generator=g,
                    shuffle=True)
for idx, noise in loader:
    print(idx.tolist(), [round(v, 4) for v in noise.tolist()])
""")

snippet("iterable-dataset-workers", """\
import math
class MyIterableDataset(torch.utils.data.IterableDataset):
    def __init__(self, start, end):
        super(MyIterableDataset).__init__()
        assert end > start, "this example code only works with end >= start"
        self.start = start
        self.end = end
    def __iter__(self):
        worker_info = torch.utils.data.get_worker_info()
        if worker_info is None:
            iter_start = self.start
            iter_end = self.end
        else:
            per_worker = int(math.ceil((self.end - self.start) / float(worker_info.num_workers)))
            worker_id = worker_info.id
            iter_start = self.start + worker_id * per_worker
            iter_end = min(iter_start + per_worker, self.end)
        return iter(range(iter_start, iter_end))
ds = MyIterableDataset(start=3, end=7)
print(list(torch.utils.data.DataLoader(ds, num_workers=0)))
print(list(torch.utils.data.DataLoader(ds, num_workers=2)))
print(list(torch.utils.data.DataLoader(ds, num_workers=12)))
""")

snippet("loader-persistent-random", """\
from torch.utils.data import Dataset, DataLoader
class Aug(Dataset):
    def __len__(self):
        return 4
    def __getitem__(self, i):
        return i + torch.rand(1).item()
loader = DataLoader(Aug(), batch_size=2, num_workers=2, persistent_workers=True, shuffle=True)
for epoch in range(3):
    print([[round(v, 4) for v in b.tolist()] for b in loader])
print(torch.rand(1))
""")

snippet("loader-worker-error", """\
from torch.utils.data import Dataset, DataLoader
class Bad(Dataset):
    def __len__(self):
        return 4
    def __getitem__(self, i):
        if i == 3:
            raise ValueError("bad item")
        return i
loader = DataLoader(Bad(), batch_size=2, num_workers=2)
for b in loader:
    print(b)
""")

snippet("loader-iterable-unequal", """\
class Counting(torch.utils.data.IterableDataset):
    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        n = 1 if info is None else info.id * 2 + 1
        wid = -1 if info is None else info.id
        return iter([(wid, k) for k in range(n)])
print(list(torch.utils.data.DataLoader(Counting(), batch_size=None, num_workers=3)))
print(list(torch.utils.data.DataLoader(Counting(), batch_size=2, num_workers=2)))
""")

snippet("loader-worker-info-fields", """\
from torch.utils.data import Dataset, DataLoader, get_worker_info
class Info(Dataset):
    def __len__(self):
        return 4
    def __getitem__(self, i):
        info = get_worker_info()
        return info.id, info.num_workers, info.seed - torch.initial_seed(), info.dataset is self
print([b for b in DataLoader(Info(), batch_size=None, num_workers=2)])
print(get_worker_info())
""")

snippet("loader-main-rng-untouched", """\
from torch.utils.data import Dataset, DataLoader
import random
import numpy as np
np.random.seed(3)
class R(Dataset):
    def __len__(self):
        return 4
    def __getitem__(self, i):
        return torch.randn(1).item() + random.random() + np.random.rand()
torch.manual_seed(1)
random.seed(1)
vals = [round(x, 4) for b in DataLoader(R(), batch_size=2, num_workers=2) for x in b.tolist()]
print(vals)
print(torch.rand(1), random.random(), np.random.rand())
""")

# -- datasets and samplers -------------------------------------------------------------------------

snippet("random-split", """\
from torch.utils.data import (random_split, TensorDataset, Subset, ConcatDataset, WeightedRandomSampler,
                              DataLoader)
ds = TensorDataset(torch.arange(10))
train, val = random_split(ds, [0.8, 0.2], generator=torch.Generator().manual_seed(42))
print(len(train), len(val), train.indices, val.indices)
a, b = random_split(range(10), [3, 7])
print(list(a), list(b))
sub = Subset(ds, [0, 2, 4])
cat = ConcatDataset([sub, sub])
print(len(cat), [x[0].item() for x in cat])
sampler = WeightedRandomSampler([0.1, 0.9], num_samples=5, replacement=True)
print(list(sampler))
print([b[0].tolist() for b in DataLoader(ds, batch_size=4, shuffle=True)])
""")
