"""check_devices and the rephrased "tensors on different devices" error (CPU and meta devices)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from support._hooks_loops import fast_collate, make_loader, mnist_mlp  # noqa: E402

import gpudoctor  # noqa: E402
from gpudoctor import DeviceMismatchError, TrainingMonitor, check_devices  # noqa: E402
from gpudoctor.hooks import explain_device_error  # noqa: E402


def test_same_device_returns_it():
    model = mnist_mlp()
    batch = (torch.zeros(4, 1, 28, 28), torch.zeros(4, dtype=torch.long))
    assert check_devices(model, batch) == "cpu"
    assert check_devices() is None


def test_mismatch_names_parameter_and_tensor_devices():
    model = mnist_mlp().to("meta")
    with pytest.raises(DeviceMismatchError) as info:
        check_devices(model, torch.zeros(64, 784), {"labels": torch.zeros(64)})
    text = str(info.value)
    assert "on meta: parameter 1.weight" in text
    assert "on cpu: input 0 (64x784), input 1['labels'] (64)" in text
    assert "x.to('meta')" in text  # the fix names the model's device
    assert isinstance(info.value, RuntimeError) and isinstance(info.value, gpudoctor.GpudoctorError)
    assert set(info.value.placement) == {"meta", "cpu"}


def test_model_split_across_devices():
    model = mnist_mlp()
    model[1].to("meta")
    with pytest.raises(DeviceMismatchError, match="model itself is split"):
        check_devices(model)


def test_error_inside_step_is_rephrased_with_the_placement():
    model = mnist_mlp().to("meta")
    monitor = TrainingMonitor(device="cpu", model=model)
    with pytest.raises(DeviceMismatchError) as info:
        for inputs, _targets in monitor.wrap(make_loader(fast_collate, n=128 * 2)):
            with monitor.step():
                model(inputs)  # torch: "Tensor on device cpu is not on the expected device meta!"
    text = str(info.value)
    assert "Tensors on different devices met in one operation" in text
    assert "on meta: parameter" in text and "on cpu: input 0[0] (128x1x28x28)" in text
    assert isinstance(info.value.__cause__, RuntimeError)  # torch's own error stays attached
    assert "torch said:" in text


def test_other_errors_are_left_alone():
    monitor = TrainingMonitor(device="cpu")
    with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied") as info:
        with monitor.step():
            torch.nn.Linear(3, 2)(torch.zeros(2, 5))
    assert not isinstance(info.value, DeviceMismatchError)


@pytest.mark.parametrize("message, argument, devices", [
    ("Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu! "
     "(when checking argument for argument mat1 in method wrapper_CUDA_addmm)", "`mat1` of `addmm`", ("cuda:0", "cpu")),
    ("Expected all tensors to be on the same device, but got mat1 is on cpu, different from other tensors "
     "on cuda:0 (when checking argument in method wrapper_CUDA_addmm)", "`mat1` of `addmm`", ("cpu", "cuda:0")),
])
def test_explains_both_cuda_wordings(message, argument, devices):
    words = explain_device_error(RuntimeError(message))
    assert argument in words and f"{devices[0]} and {devices[1]}" in words


def test_unrelated_message_is_not_explained():
    assert explain_device_error(RuntimeError("CUDA out of memory")) is None
