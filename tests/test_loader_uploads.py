"""A data loader's new batches vs the same host array uploaded again (issue 26).

JAX uploads a NumPy argument at every call. For a loader's batch that is unavoidable; for a
constant mask passed to the jitted step it is not. The capture gives each uploaded array an
identity (object and sampled content, capture/jaxhooks/host_data.py); the rule warns on the
mask only, naming the argument, the line that made it and the count, and says at most an info
about the loader. Also the identity of views and JAX's copies, containers, and explicit
``jax.device_put`` of the same array in a loop (repeated-put). Expected numbers are counted by
hand from the scripts below.
"""
from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import audit_json, cli, jaxplace
from inprocess import recorded
from test_rules_unit import CFG, Rows

from jaxplace_cli.analysis import audit_run
from jaxplace_cli.model.events import H2D, MARKER_HOST_DATA, MARKER_HOST_PUT

# The walkthrough's training script: 20 steps, a new (32, 64) float32 batch each (8 KiB), and a
# (64, 64) float32 mask (16 KiB) made once on line 6 and passed to the jitted step on line 21.
TRAIN = """\
import jax
import jax.numpy as jnp
import numpy as np

rng = np.random.default_rng(0)
mask = np.tril(np.ones((64, 64), np.float32))  # line 6: the constant mask


def loader(steps):
    for _ in range(steps):
        yield rng.normal(size=(32, 64)).astype(np.float32)  # a new batch each step


@jax.jit
def step(w, batch, mask):
    return w - 0.01 * (batch @ (w * mask)).mean()


w = jnp.ones((64, 64))
{prepare}for batch in loader(20):
    w = step(w, batch, mask)  # line 21: batch is new data, mask {what}
print(float(w.sum()))
"""


def _uploads(r):
    return [t for t in r.of(H2D) if t.implicit and t.api.endswith("(numpy argument)")]


def test_capture_gives_the_mask_one_identity_and_each_batch_its_own():
    rng = np.random.default_rng(0)
    mask = np.tril(np.ones((64, 64), np.float32))
    with recorded() as r:
        step = jax.jit(lambda w, batch, mask: w - 0.01 * (batch @ (w * mask)).mean())
        w = jnp.ones((64, 64))
        for _ in range(20):
            w = step(w, rng.normal(size=(32, 64)).astype(np.float32), mask)
    ups = _uploads(r)
    assert len(ups) == 40 and all(t.buf < 0 for t in ups)  # 20 calls x (batch, mask)
    masks = [t for t in ups if t.bytes == 64 * 64 * 4]
    batches = [t for t in ups if t.bytes == 32 * 64 * 4]
    assert len(masks) == 20 and len({t.buf for t in masks}) == 1  # the same array, 20 times
    assert len(batches) == 20 and len({t.buf for t in batches}) == 20  # new data each call
    (marker,) = [json.loads(m.value) for m in r.markers if m.kind == MARKER_HOST_DATA]
    assert marker["id"] == masks[0].buf
    assert (marker["arg"], marker["var"], marker["shape"], marker["dtype"]) == ("mask", "mask", [64, 64], "float32")
    assert marker["made"] != 0  # the assignment above, in this function


def test_jnp_asarray_of_one_mask_is_one_identity_not_a_loader():
    # JAX hands jnp.asarray's dispatch a TypedNdArray (a new view of the mask at every call, or a
    # converted copy of a float64 mask without x64): 20 calls, 20 legs, counted by hand
    mask = np.tril(np.ones((64, 64), np.float32))
    mask64 = np.tril(np.ones((64, 64)))  # float64: converted to float32 at every call (x64 off)
    assert not jax.config.jax_enable_x64
    rng = np.random.default_rng(0)
    with recorded() as r:
        for _ in range(20):
            jnp.asarray(mask)
            jnp.array(mask64)
            jnp.asarray(rng.normal(size=(8, 8)).astype(np.float32))  # a loader's new batch
    ups = [t for t in r.of(H2D) if t.api in ("jnp.asarray (host data)", "jnp.array (host data)")]
    assert [t.bytes for t in ups] == [16_384, 16_384, 256] * 20 and all(t.buf < 0 for t in ups)
    assert len({t.buf for t in ups[0::3]}) == 1 and len({t.buf for t in ups[1::3]}) == 1  # the same array
    assert len({t.buf for t in ups[2::3]}) == 20  # new data each call
    markers = [json.loads(m.value) for m in r.markers if m.kind == MARKER_HOST_DATA]
    assert sorted((m["id"], m["var"], m["dtype"]) for m in markers) == sorted(
        [(ups[0].buf, "mask", "float32"), (ups[1].buf, "mask64", "float64")])


def test_a_view_of_one_mask_made_at_every_call_is_that_mask():
    # step(x, mask[None]): a new view object at every call, one host array (the guard: 6 uploads)
    mask = np.tril(np.ones((64, 64), np.float32))
    data = np.arange(6 * 64 * 64, dtype=np.float32).reshape(6, 1, 64, 64)
    with recorded() as r:
        step = jax.jit(lambda x, m: x * m)
        x = jnp.ones((1, 64, 64))
        for i in range(6):
            x = step(x, mask[None])
            step(x, data[i])  # a slice of a dataset: new data at every call
    ups = _uploads(r)
    assert [t.bytes for t in ups] == [16_384] * 12
    assert len({t.buf for t in ups[0::2]}) == 1 and len({t.buf for t in ups[1::2]}) == 6


def test_two_numpy_arguments_of_one_shape_are_not_guessed():
    from jax._src.literals import TypedNdArray

    from jaxplace_cli.capture.jaxhooks.host_data import users_array

    a, b = np.ones((4, 4), np.float32), np.zeros((4, 4), np.float32)
    view = TypedNdArray(a)
    assert view is not a and users_array(view, (a, b), {}) is a  # the viewed one, by identity
    copy = TypedNdArray(a.astype(np.float16))
    assert users_array(copy, (a,), {}) is a  # converted: the one argument of its shape
    assert users_array(copy, (a, b), {}) is copy.base  # two candidates: no guess (the copy's own)
    assert users_array(copy, (), {"x": a}) is a
    scalar = TypedNdArray(np.asarray(2.0, np.float32))
    assert users_array(scalar, (np.array(2.0, np.float32),), {}) is scalar.base  # 0-d: JAX makes those from scalars
    # a whole view (a new object at every call) is the array it views; a slice is not the whole
    for view in (a[None], a.T, a.reshape(16), TypedNdArray(a[None])):
        assert users_array(view, (view,), {}) is a
    data = np.zeros((16, 4))
    for part in (data[2:6], data[::-1], data[:, 0]):
        assert users_array(part, (part,), {}) is part


def test_identity_is_object_and_content_never_the_address_alone():
    from jaxplace_cli.capture.jaxhooks.host_data import data_id
    from jaxplace_cli.capture.recorder import Recorder

    rec = Recorder()
    a = np.zeros(4096, np.float32)
    first = data_id(rec, a)
    assert first < 0 and data_id(rec, a) == first  # the same object, unchanged
    a[:] = 1.0  # a loader refilling its buffer in place: new data
    assert data_id(rec, a) not in (0, first)
    seen = {data_id(rec, a)}
    for _ in range(50):  # freed and made again: CPython reuses the address, the identity is new
        b = np.ones(4096, np.float32)
        k = data_id(rec, b)
        assert k not in seen
        seen.add(k)
        del b
    assert data_id(rec, np.float32(1.0)) == 0  # a NumPy scalar: no weak reference, no identity
    tiny = np.array(1.0, np.float32)  # 4 bytes: hashed whole
    assert data_id(rec, tiny) == data_id(rec, tiny) < 0
    assert rec.recording_errors == 0


def test_a_batch_buffer_refilled_in_place_is_new_data_at_every_fill():
    # a loader taking 32 images with zero borders into one buffer: sampled at the stride n // 32,
    # every sample was pixel 0 of an image (a zero), and 8 fills read as one array uploaded 8 times
    from jaxplace_cli.capture.jaxhooks.host_data import data_id
    from jaxplace_cli.capture.recorder import Recorder

    rng = np.random.default_rng(0)
    images = np.zeros((100, 28, 28), np.float32)
    images[:, 4:24, 4:24] = rng.random((100, 20, 20), dtype=np.float32)
    images[:, -1, -1] = 0.0  # the last element too: only the inside changes
    buf = np.empty((32, 28, 28), np.float32)
    rec = Recorder()
    ids = []
    for _ in range(8):
        np.take(images, rng.integers(0, 100, 32), axis=0, out=buf)
        ids += [data_id(rec, buf), data_id(rec, buf)]  # each fill: new data, then the same again
    assert len(set(ids)) == 8 and all(ids[i] == ids[i + 1] < 0 for i in range(0, 16, 2))
    assert rec.recording_errors == 0


def _run(tmp_path, name, prepare, what):
    script = tmp_path / f"{name}.py"
    script.write_text(TRAIN.format(prepare=prepare, what=what))
    out = tmp_path / f"{name}.run"
    proc = jaxplace("run", "--devices", 1, "--no-trace", "--quiet", "--out", out, script)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture(scope="module")
def walkthrough(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("loader"), "train", "", "the same array again")


def test_the_mask_is_warned_and_the_loader_is_not(walkthrough):
    found = audit_json(walkthrough)["findings"]
    (warn,) = [f for f in found if f["severity"] in ("warning", "error")]
    assert (warn["rule"], warn["file"].rsplit("/", 1)[-1], warn["line"]) == ("implicit-h2d-in-loop", "train.py", 21)
    assert (warn["count"], warn["bytes"]) == (20, 20 * 16_384)  # 20 uploads of the 16 KiB mask
    assert "argument `mask` of jit(step)" in warn["message"] and "made at train.py:6" in warn["message"]
    assert "uploaded 20 times at train.py:21" in warn["message"]
    assert warn["fix"].startswith("mask = jax.device_put(mask) once, before the loop")
    assert [(r["line"], r["role"]) for r in warn["related"]] == [(6, "the array is made here")]
    (info,) = [f for f in found if f["severity"] == "info"]  # the loader: said, not warned
    assert (info["rule"], info["line"], info["count"], info["bytes"]) == ("implicit-h2d-in-loop", 21, 20, 20 * 8192)
    assert "new host data at every call" in info["message"] and "prefetch" in info["fix"]


def test_walkthrough_audit_names_the_mask_and_not_the_loader(walkthrough):
    proc = cli("audit", walkthrough, "--format", "text")
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())  # the text report wraps its lines
    assert "argument `mask` of jit(step): the same float32[64,64] host array" in out
    assert "argument `batch`" not in out and "new host data at every call" in out
    # the loader's info is a group of its own, never under the mask's warning heading
    headings = [ln for ln in proc.stdout.splitlines() if ln.startswith(("warning implicit", "info implicit"))]
    assert headings == ["warning implicit-h2d-in-loop · 1 site", "info implicit-h2d-in-loop · 1 site"], headings


def test_clean_twin_the_mask_put_once_gets_no_warning(tmp_path):
    run = _run(tmp_path, "train_clean", "mask = jax.device_put(mask)\n", "is on the device")
    found = audit_json(run)["findings"]
    # the put moved the call to line 22; the loader's info stays, nothing else
    assert [(f["severity"], f["line"], f["count"]) for f in found] == [("info", 22, 20)]


def _three_uploads_of_one_array() -> Rows:
    """Three calls at line 21, each uploading the same 16 KiB host array (identity -100)."""
    r = Rows(devices=("cpu:0",))
    call = r.site(21)
    for k in range(3):
        r.op(2 * k + 1, "jit(step)", kind="jit", outs=[k + 1], site=call)
        r.xfer(2 * k + 2, H2D, "host", "cpu:0", 16_384, call, "jit(step) (numpy argument)",
               implicit=True, buf=-100, op_seq=2 * k + 1)
    return r


def test_a_damaged_host_data_marker_is_one_line_exit_2(tmp_path):
    r = _three_uploads_of_one_array()
    r.marker(7, MARKER_HOST_DATA, '{"id": -100, "arg": 3}')
    run = r.open(tmp_path / "run")
    proc = cli("audit", tmp_path / "run")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "host_data marker" in proc.stderr
    run.store.close()


def test_rows_three_uploads_of_one_array_without_a_marker_still_warn(tmp_path):
    # a marker lost with the process: the identity alone says "the same data again"
    r = _three_uploads_of_one_array()
    found = audit_run(r.open(tmp_path / "run"), CFG).findings
    assert [(f.severity, f.line, f.count, f.bytes) for f in found] == [("warning", 21, 3, 3 * 16_384)]
    assert found[0].message.startswith("a NumPy argument of jit(step): the same host array was uploaded 3 times")



def test_one_array_passed_twice_a_call_is_two_uploads_a_call(tmp_path):
    # step(x, m, m): the guard logs two legs a call; 3 calls are 6 uploads, said as such
    r = Rows(devices=("cpu:0",))
    call = r.site(21)
    for k in range(3):
        r.op(3 * k + 1, "jit(step)", kind="jit", outs=[k + 1], site=call)
        for j in (2, 3):
            r.xfer(3 * k + j, H2D, "host", "cpu:0", 16_384, call, "jit(step) (numpy argument)",
                   implicit=True, buf=-100, op_seq=3 * k + 1)
    found = audit_run(r.open(tmp_path / "run"), CFG).findings
    assert [(f.severity, f.line, f.count, f.bytes) for f in found] == [("warning", 21, 6, 6 * 16_384)]
    assert "the same host array was uploaded 6 times in 3 calls at" in found[0].message


CONSTS = """\
import jax
import jax.numpy as jnp
import numpy as np
consts = {"mask": np.ones((64, 64), np.float32), "bias": np.zeros((64, 64), np.float32)}
step = jax.jit(lambda x, c: x * c["mask"] + c["bias"])
x = jnp.ones((64, 64))
for _ in range(6):
    x = step(x, consts)  # line 8: two constant arrays in the caller's dict, 12 uploads
print(float(x.sum()))
"""


def test_constant_arrays_in_a_dict_are_one_finding_fixed_by_the_caller_s_name(tmp_path):
    script = tmp_path / "consts.py"
    script.write_text(CONSTS)
    proc = jaxplace("run", "--devices", 1, "--no-trace", "--quiet", "--out", tmp_path / "run", script)
    assert proc.returncode == 0, proc.stderr
    (f,) = audit_json(tmp_path / "run")["findings"]
    assert (f["rule"], f["severity"], f["line"], f["count"], f["bytes"]) == ("implicit-h2d-in-loop", "warning", 8, 12,
                                                                            12 * 16_384)
    assert "2 host arrays, made at consts.py:4" in f["message"] and "12 uploads in 6 calls" in f["message"]
    assert f["fix"].startswith("consts = jax.device_put(consts) once, before the loop (after consts.py:4)")


PUTS = """\
import jax
import jax.numpy as jnp
import numpy as np
mask = np.tril(np.ones((64, 64), np.float32))
rng = np.random.default_rng(0)
step = jax.jit(lambda x, m: x * m)
x = jnp.ones((64, 64))
{prepare}for _ in range(6):
    x = step(x, {mask})  # line 9: the mask put on the device at every step
    b = jax.device_put(rng.normal(size=(64, 64)).astype(np.float32))  # line 10: a loader's new batches
print(float(x.sum()))
"""


@pytest.mark.parametrize("clean", [False, True])
def test_the_same_array_put_in_a_loop_is_a_finding_and_a_loader_s_puts_are_not(tmp_path, clean):
    script = tmp_path / "puts.py"
    script.write_text(PUTS.format(prepare="mask = jax.device_put(mask)\n" if clean else "",
                                  mask="mask" if clean else "jax.device_put(mask)"))
    proc = jaxplace("run", "--devices", 1, "--no-trace", "--quiet", "--out", tmp_path / "run", script)
    assert proc.returncode == 0, proc.stderr
    found = audit_json(tmp_path / "run")["findings"]
    if clean:  # put once, before the loop (the line moved to 10): nothing to act on
        assert found == []
        return
    (f,) = found
    assert (f["rule"], f["severity"], f["line"], f["count"], f["bytes"]) == ("repeated-put", "warning", 9, 6, 6 * 16_384)
    assert "the same float32[64,64] host array, made at puts.py:4," in f["message"]
    assert f["fix"].startswith("mask = jax.device_put(mask) once, before the loop (after puts.py:4)")


@pytest.mark.parametrize("value", ['{"op": 3}', '{"op": 3, "ids": [4]}', '{"op": true, "ids": [-1]}', "[1, 2]", "{"])
def test_a_damaged_host_put_marker_is_one_line_exit_2(tmp_path, value):
    r = _three_uploads_of_one_array()
    for k in range(3):
        r.marker(20 + k, MARKER_HOST_PUT, json.dumps({"op": 2 * k + 1, "ids": [-100]}))
    r.marker(30, MARKER_HOST_PUT, value)
    run = r.open(tmp_path / "run")
    proc = cli("audit", tmp_path / "run")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "host_put marker" in proc.stderr
    run.store.close()


def _markers(r) -> list[dict]:
    return [json.loads(m.value) for m in r.markers if m.kind == MARKER_HOST_DATA]


def test_the_array_is_named_as_the_call_was_given_it():
    # a review's finds: table (a whole view of a temporary 1-D array) lost its name and shape to
    # that base; a loader's dict rebuilt at every step named its constant mask by the dict, whose
    # fix (put the dict once, before the loop) would freeze the data
    import types

    table = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    held = types.SimpleNamespace(mask=np.tril(np.ones((64, 64), np.float32)))  # no variable of its own
    rng = np.random.default_rng(0)
    with recorded() as r:
        step = jax.jit(lambda x, t: x + t)
        step_b = jax.jit(lambda w, b: w + (b["x"] * b["mask"]).sum())
        x, w = jnp.zeros((64, 64)), jnp.zeros(())
        for _ in range(3):
            x = step(x, table)
        for _ in range(3):
            batch = {"x": rng.random((64, 64), dtype=np.float32), "mask": held.mask}  # a new dict each step
            w = step_b(w, batch)
    by_var = {(m["var"], tuple(m["shape"]), m["arg"]) for m in _markers(r)}
    assert ("table", (64, 64), "t") in by_var
    assert ("", (64, 64), "b['mask']") in by_var  # not batch['mask']: that dict is made at every step
    assert all(m["made"] == 0 for m in _markers(r) if m["arg"] == "b['mask']")


def test_a_numpy_subclass_is_never_taken_for_another_argument():
    from jaxplace_cli.capture.jaxhooks.host_data import users_array

    class Sub(np.ndarray):  # a user's subclass (np.memmap is one): its own array, no guess
        pass

    part = np.zeros((32, 64), np.float32).view(Sub)
    pos = np.ones((32, 64), np.float32)
    assert users_array(part, (part, pos), {}) is part.base


def test_a_replicated_put_of_one_array_is_a_leg_per_device(tmp_path):
    # jax.device_put(mask, replicated over cpu:0 and cpu:1) at line 9, 3 calls: 6 uploads of 16 KiB
    r = Rows(devices=("cpu:0", "cpu:1"))
    at = r.site(9)
    for k in range(3):
        op = 10 * (k + 1)
        r.op(op, "device_put", "cpu:0,cpu:1", "device_put", outs=[op], site=at)
        for j, dev in enumerate(("cpu:0", "cpu:1")):
            r.xfer(op + 1 + j, H2D, "host", dev, 16_384, at, "jax.device_put", buf=op, op_seq=op)
        r.marker(op + 5, MARKER_HOST_PUT, json.dumps({"op": op, "ids": [-100]}))
    found = audit_run(r.open(tmp_path / "run"), CFG).findings
    (f,) = [f for f in found if f.rule == "repeated-put"]
    assert (f.line, f.count, f.bytes, f.devices) == (9, 6, 6 * 16_384, ["cpu:0", "cpu:1"])
    assert "on the device 3 times (6 uploads: a leg per device) at" in f.message
