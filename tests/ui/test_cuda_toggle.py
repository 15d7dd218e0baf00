"""The playground's "Run cuda on the CPU" toggle in a real browser (issue 24, 5): GPU code fails with the
way forward, the toggle runs it again with cuda on the CPU and says so, its permalink keeps the option."""

from __future__ import annotations

from tests.browser_support import open_page, run_code, runs, wait_for_run

GPU = 'x = torch.ones(2, 3).cuda()\ny = (x * 2).sum()\nprint(y.device)\n'


def test_the_toggle_runs_gpu_code_on_the_cpu_and_the_link_keeps_it(page) -> None:
    open_page(page)
    run_code(page, GPU)
    error = page.get_by_test_id("error")
    assert "Torch not compiled with CUDA enabled" in error.inner_text()
    assert "Run cuda on the CPU" in error.inner_text()  # the way forward names the toggle
    before = runs(page)
    page.get_by_test_id("cuda-on-cpu").check()  # applies at once: the code runs again
    wait_for_run(page, before)
    assert page.get_by_test_id("error").count() == 0
    assert "simulated" in page.get_by_test_id("cuda-notice").inner_text()
    assert page.evaluate("AX.explorer.code") == GPU
    page.wait_for_function("() => location.search.includes('cuda=1')")
    page.reload()
    wait_for_run(page, 0)
    assert page.get_by_test_id("cuda-on-cpu").is_checked()
    assert page.get_by_test_id("cuda-notice").is_visible()
