"""Storages known only by their bytes (inside a backward pass): an address names a storage only while
a tensor the trace met on it still lives there. The allocator hands a freed block to the next
allocation at once, so a gradient made at a freed gradient's address is a new storage."""

from __future__ import annotations

import gc

import torch

from app.engine.ids import StorageIds, tensor_pointer


def test_a_storage_known_by_its_bytes_keeps_its_id_while_a_tensor_on_it_lives() -> None:
    ids = StorageIds()
    grad = torch.ones(4)
    pointer = tensor_pointer(grad)
    sid = ids.of_pointer(pointer, grad)
    view = grad[1:]  # another tensor on the same bytes, met later
    assert ids.of_pointer(pointer, view) == sid
    assert ids.known_pointer(pointer) == sid
    del grad
    gc.collect()
    assert ids.known_pointer(pointer) == sid, "the view still holds the storage"


def test_an_address_whose_tensors_all_died_names_a_new_storage() -> None:
    ids = StorageIds()
    old = torch.ones(4)
    pointer = tensor_pointer(old)
    sid = ids.of_pointer(pointer, old)
    del old
    gc.collect()
    assert ids.known_pointer(pointer) is None
    new = torch.zeros(8)  # what stands at that address now, whatever the allocator chose
    fresh = ids.of_pointer(pointer, new)
    assert fresh != sid
    assert ids.take_bare_pointers() == {pointer: fresh}


def test_a_tensor_moved_off_the_bytes_does_not_hold_them() -> None:
    ids = StorageIds()
    grad = torch.ones(4)
    pointer = tensor_pointer(grad)
    sid = ids.of_pointer(pointer, grad)
    grad.set_(torch.ones(16))  # the tensor lives on, over other bytes
    assert tensor_pointer(grad) != pointer
    assert ids.known_pointer(pointer) is None
    assert ids.of_pointer(pointer, torch.ones(1)) != sid


def test_a_storage_met_through_a_fleeting_wrapper_is_held_until_the_pass_ends() -> None:
    """A saved output's wrapper is made afresh at each access and dies at once, while what torch
    saved keeps its storage alive: the storage is taken to live on."""
    ids = StorageIds()
    x = torch.ones(3, requires_grad=True)
    y = x.exp()
    wrapper = y.grad_fn._saved_result
    pointer = tensor_pointer(wrapper)
    sid = ids.of_pointer(pointer, wrapper, saved_by="n2")
    del wrapper, y
    gc.collect()
    assert ids.known_pointer(pointer) == sid
    ids.take_bare_pointers()
    assert ids.known_pointer(pointer) is None  # forgotten once the pass is over


def test_a_storage_held_through_saved_outputs_dies_when_the_nodes_that_saved_it_free_them() -> None:
    """Within one pass: once every node that saved it has run (torch frees what a node saved right
    after it runs), its address names whatever the allocator puts there next — a hook's new scalar
    in ``(h * 2).sum().backward()`` with a backward pass in ``h``'s hook is a new storage, in every
    run, whether or not the allocator happened to reuse the address."""
    ids = StorageIds()
    ids.pass_depth = 1
    x = torch.ones(3, requires_grad=True)
    y = x.exp()
    first, second = y.grad_fn._saved_result, y.grad_fn._saved_result
    pointer = tensor_pointer(first)
    sid = ids.of_pointer(pointer, first, saved_by="n2")
    assert ids.of_pointer(pointer, second, saved_by="n5") == sid
    del first, second, y
    gc.collect()
    ids.release_saved("n2")
    assert ids.known_pointer(pointer) == sid, "n5 still holds what it saved"
    ids.release_saved("n9")  # a node that saved nothing here changes nothing
    assert ids.known_pointer(pointer) == sid
    ids.release_saved("n5")
    assert ids.known_pointer(pointer) is None
    # the allocator's next block at that address (the address is given: reuse is its choice)
    assert ids.of_pointer(pointer, torch.zeros(1)) != sid


def test_an_undone_attempt_forgets_the_storage_it_named() -> None:
    ids = StorageIds()
    grad = torch.ones(4)
    pointer = tensor_pointer(grad)
    mark = ids.journal.mark()
    sid = ids.of_pointer(pointer, grad)
    ids.journal.rollback(mark)
    assert ids.known_pointer(pointer) is None
    assert ids.of_pointer(pointer, grad) == sid, "the undone id is handed out again"
