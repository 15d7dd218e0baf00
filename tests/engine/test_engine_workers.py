"""DataLoader workers loaded in the snippet's process as worker processes load them
(``app.engine.workers``): torch's own multiprocessing loader, in a plain run of the same code, is the
oracle — the batches (a dataset's random augmentations drawn from each worker's own seeded
generators), what ``get_worker_info()`` says, the order of an iterable dataset split across workers,
the snippet's own random state after the loop, a worker's error in torch's words; and the
incremental trace equals the whole one."""

from __future__ import annotations

import pytest
from torch_oracle import assert_same_as_plain, run_plain, trace

from tests.engine.test_engine_incremental import _assert_same

AUGMENTED = """\
import random
import numpy as np
from torch.utils.data import Dataset, DataLoader
np.random.seed(3)
class Augmented(Dataset):
    def __len__(self):
        return 6
    def __getitem__(self, i):
        x = torch.full((2,), float(i))
        noise = torch.rand(2) + random.random() + float(np.random.rand())
        return x + noise, i
loader = DataLoader(Augmented(), batch_size=2, shuffle=True, num_workers=2{persistent})
model = nn.Linear(2, 1)
for epoch in range(2):
    for xb, idx in loader:
        loss = model(xb).pow(2).mean()
        loss.backward()
    print(epoch, idx.tolist(), [round(v, 4) for v in xb.flatten().tolist()])
after = torch.rand(2)
print(round(random.random(), 4), round(float(np.random.rand()), 4))
"""

ITERABLE = """\
import math
class Range(torch.utils.data.IterableDataset):
    def __init__(self, start, end):
        super().__init__()
        self.start, self.end = start, end
    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        if info is None:
            return iter(range(self.start, self.end))
        per_worker = int(math.ceil((self.end - self.start) / float(info.num_workers)))
        first = self.start + info.id * per_worker
        return iter(range(first, min(first + per_worker, self.end)))
for workers in (0, 2, 3):
    print(workers, [b.tolist() for b in torch.utils.data.DataLoader(Range(3, 10), batch_size=2,
                                                                    num_workers=workers)])
"""

INIT_AND_INFO = """\
import random
from torch.utils.data import Dataset, DataLoader, get_worker_info
seen = []
def seed_worker(worker_id):
    random.seed(torch.initial_seed() % 2**32)
class Info(Dataset):
    def __len__(self):
        return 4
    def __getitem__(self, i):
        info = get_worker_info()
        return info.id, info.num_workers, info.seed - torch.initial_seed(), round(random.random(), 4)
g = torch.Generator()
g.manual_seed(0)
print(list(DataLoader(Info(), batch_size=None, num_workers=2, worker_init_fn=seed_worker, generator=g)))
print(get_worker_info())
"""

# A worker's batch reaches the main process as a copy: changing it leaves the dataset as it was.
HANDED_OVER = """\
from torch.utils.data import TensorDataset, DataLoader
data = torch.arange(6.0).view(3, 2)
ds = TensorDataset(data)
for (row,) in DataLoader(ds, batch_size=None, num_workers=2):
    row.mul_(10)
    print(row.tolist(), row._version)
batches = list(DataLoader(ds, batch_size=2, num_workers=1, collate_fn=lambda items: items))
print(data.tolist(), len(batches), [item[0]._version for batch in batches for item in batch])
"""

FAILING = """\
from torch.utils.data import Dataset, DataLoader
class Bad(Dataset):
    def __len__(self):
        return 4
    def __getitem__(self, i):
        if i == 3:
            raise ValueError("bad item")
        return torch.ones(1) * i
for batch in DataLoader(Bad(), batch_size=2, num_workers=2):
    print(batch.tolist())
"""


@pytest.mark.parametrize("persistent", ["", ", persistent_workers=True"], ids=["fresh", "persistent"])
def test_a_workers_random_augmentations_are_its_own(persistent: str) -> None:
    source = AUGMENTED.format(persistent=persistent)
    result = assert_same_as_plain(source)  # xb: stacked into shared memory by torch, here not (version 1)
    assert result["ok"], result["error"]
    _assert_same(source)


@pytest.mark.parametrize(("name", "source"), [("iterable", ITERABLE), ("init-and-info", INIT_AND_INFO),
                                              ("handed-over", HANDED_OVER)])
def test_workers_split_and_seed_as_torchs_do(name: str, source: str) -> None:
    result, plain = trace(source), run_plain(source)
    assert result["ok"], result["error"]
    assert result["steps"][-1]["stdout"] == plain.stdout


def test_a_workers_error_is_said_in_torchs_words() -> None:
    result, plain = trace(FAILING), run_plain(FAILING)
    assert result["steps"][-1]["stdout"] == plain.stdout == "[[0.0], [1.0]]\n"
    error = result["error"]
    assert (error["type"], error["line"]) == ("ValueError", plain.error_line)
    assert error["message"] == str(plain.error)  # "Caught ValueError in DataLoader worker process 1 ..."
