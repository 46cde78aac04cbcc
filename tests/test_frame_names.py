"""Readable names (folded/report/flamegraph), launch stacks without the tracer's frames, API
names as users know them, and the report's "launched from"."""

from __future__ import annotations

from collector.frame_names import short_name, shorten_stack
from collector.model import Frame
from collector.sources.cupti_api import api_name
from collector.sources.cupti_launch_stacks import drop_interpreter_addresses, drop_tracer_frames
from exporters.report.queries import launched_from


def test_cpp_names_lose_parameters_and_templates() -> None:
    cases = {
        "at::native::copy_impl(at::Tensor&, at::Tensor const&, bool)": "at::native::copy_impl",
        "void c10::function_ref<void (char**, long const*, long, long)>::callback_fn<at::native::"
        "(anonymous namespace)::f<float>(at::TensorIteratorBase&)::{lambda(char**)#1}>(long, "
        "char**)": "c10::function_ref::callback_fn",
        "c10::impl::OperatorEntry::computeDispatchTableEntry(c10::Dispatcher const&, "
        "c10::DispatchKey) const": "c10::impl::OperatorEntry::computeDispatchTableEntry",
        "at::Tensor::operator()(long) const": "at::Tensor::operator()",
        "bool std::operator<< <char>(std::ostream&, char const*)": "std::operator<<",
        "foo() [clone .cold]": "foo",
    }
    for full, short in cases.items():
        assert short_name(full) == short, full


def test_other_frames_are_left_alone() -> None:
    for name in (
        "leaf (two_callers.py:12)",
        "[GPU_Kernel]void at::native::elementwise_kernel<128, 4>(int)",
        "python3.12+0x6bcf22",
        "0x7f00deadbeef",
        "main",
    ):
        assert short_name(name) == name
    assert shorten_stack("main;f(int);g<int>(x)") == "main;f;g"


def test_api_names_without_cupti_suffixes() -> None:
    assert api_name("cudaLaunchKernel_v7000") == "cudaLaunchKernel"
    assert api_name("cuLaunchKernel_ptsz") == "cuLaunchKernel"
    assert api_name("cudaMemcpyAsync_ptsz_v7000") == "cudaMemcpyAsync"
    assert api_name("cuCtxSynchronize") == "cuCtxSynchronize"


def _frames(*spec: tuple[str, str]) -> list[Frame]:
    return [Frame(name, f"/usr/lib/{module}") for name, module in spec]


def test_tracer_frames_dropped_down_to_the_api_call() -> None:
    # Innermost first, as the unwinder gives them: CUPTI's callback, the driver's dispatch to
    # it, then cudaLaunchKernel in libcudart and the program.
    runtime = _frames(
        ("libcupti.so.13+0x7d163", "libcupti.so.13"),
        ("libcupti.so.13+0x7c000", "libcupti.so.13"),
        ("libcuda.so.1+0x4cb046", "libcuda.so.1"),
        ("cudaLaunchKernel", "libcudart.so.13"),
        ("at::native::launch", "libtorch_cuda.so"),
    )
    kept, dropped = drop_tracer_frames(runtime)
    assert [f.function for f in kept] == ["cudaLaunchKernel", "at::native::launch"]
    assert dropped == 3
    # cudart linked statically into the caller (cuBLAS): the driver's unnamed frames go too.
    static = _frames(
        ("libcupti.so.13+0x7d163", "libcupti.so.13"),
        ("libcuda.so.1+0x4cb046", "libcuda.so.1"),
        ("libcublasLt.so.13+0x71ba5cd", "libcublasLt.so.13"),
    )
    kept, dropped = drop_tracer_frames(static)
    assert [f.function for f in kept] == ["libcublasLt.so.13+0x71ba5cd"] and dropped == 2
    # A driver API call made by the program: the driver entry point stays innermost.
    driver = _frames(
        ("libcupti.so.13+0x7d163", "libcupti.so.13"),
        ("libcuda.so.1+0x1234", "libcuda.so.1"),
        ("cuLaunchKernel", "libcuda.so.1"),
        ("main", "app"),
    )
    kept, dropped = drop_tracer_frames(driver)
    assert [f.function for f in kept] == ["cuLaunchKernel", "main"] and dropped == 2


def test_unnamed_interpreter_frames_dropped_only_beside_python_frames() -> None:
    frames = [
        Frame("leaf (x.py:3)", "/tmp/x.py", 3),
        Frame("python3.12+0x6bcf22", "/usr/bin/python3.12"),
        Frame("PyObject_Vectorcall", "/usr/bin/python3.12"),
        Frame("libc.so.6+0x2a1ca", "/lib/libc.so.6"),
    ]
    kept, dropped = drop_interpreter_addresses(frames)
    assert [f.function for f in kept] == [
        "leaf (x.py:3)",
        "PyObject_Vectorcall",
        "libc.so.6+0x2a1ca",
    ]
    assert dropped == 1
    native_only = frames[1:]
    assert drop_interpreter_addresses(native_only) == (native_only, 0)


def test_launched_from_names_the_users_code() -> None:
    stack = (
        "python3;_start;main;train (train.py:40);forward (model.py:12);at::linear;cudaLaunchKernel"
    )
    assert launched_from(stack) == "forward (model.py:12)"
    native = "app;_start;main;run_solver;c10::Dispatcher::call;at::native::launch;cuLaunchKernel"
    assert launched_from(native) == "run_solver"
    # The autograd thread runs no Python: the backward node that launched.
    autograd = (
        "pt_autograd_0;libc.so.6+0x129ecc;libstdc++.so.6+0xecdb4;torch::autograd::Engine::"
        "thread_main;torch::autograd::generated::AddmmBackward0::apply;at::mm;"
        "cublasLtSSSMatmul;libcublasLt.so.13+0x327676b;cuLaunchKernel"
    )
    assert launched_from(autograd) == "torch::autograd::generated::AddmmBackward0::apply"
    framework_only = (
        "pt_autograd_0;libc.so.6+0x129ecc;torch::autograd::Engine::thread_main;at::_sum_to;"
        "at::native::gpu_reduce_kernel.isra.0;cudaLaunchKernel"
    )
    assert launched_from(framework_only) == "at::native::gpu_reduce_kernel.isra.0"


def test_device_stub_names_are_demangled() -> None:
    # From a PyTorch 2.11 launch stack (AdamW's foreach kernels).
    stub = (
        "__device_stub__ZN2at6native57_GLOBAL__N__e658eeb9_24_ForeachBinaryOpScalar_cu_"
        "86b9896c25multi_tensor_apply_kernelINS1_18TensorListMetadataILi1EEENS1_21BinaryOp"
        "ScalarFunctorIfLi1ELi1ELi0EEEJSt10multipliesIfEfEEEvT_T0_DpT1_(at::native::x&)"
    )
    assert short_name(stub) == (
        "__device_stub__ at::native::(anonymous namespace)::multi_tensor_apply_kernel"
    )
