"""The messages our own code writes about a run (the sandbox, the engine, the policy gate, the web
layer), each under a code: ``RunError.code`` + ``RunError.params`` say which message and with what,
``RunError.message`` is its English text.

These are written before anyone knows the reader's language (in the sandboxed child, often) and are
stored in traces, so the page translates them when it draws them (``error_text``), from the code and
the params. Pure: no torch, no Babel (the sandbox's child imports this); ``N_`` only marks the
templates for the catalog. A torch exception's own text is never given a code: it stays as torch
wrote it, inside a translated frame.

Templates use ``str.format`` fields; a field's value is a number, or text that is code, a path, a
figure or torch's words (never a sentence of ours: that would stay English).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

Param = str | int | float


def N_(message: str) -> str:  # noqa: N802 - the gettext convention: marked for the catalog
    return message


TEMPLATES: dict[str, str] = {
    # the sandbox: how a child ended (app/sandbox/outcome.py, child.py, pool.py, runner.py)
    "timeout.wall": N_("The snippet ran longer than {seconds:g} s and was stopped."),
    "timeout.cpu": N_("The snippet used more than {seconds} s of CPU time and was stopped."),
    "timeout.wall_shown": N_("The snippet ran longer than {seconds:g} s and was stopped. The steps up to "
                             "there are shown."),
    "timeout.cpu_shown": N_("The snippet used more than {seconds} s of CPU time and was stopped. The steps "
                            "up to there are shown."),
    "timeout.wall_forced": N_("The snippet ran longer than {seconds:g} s and kept running after it was told "
                              "to stop (it catches every exception, even the one that stops it), so it was "
                              "ended after {steps:,} steps. The steps up to there are shown."),
    "timeout.cpu_forced": N_("The snippet ran more than {seconds} s of CPU time and kept running after it "
                             "was told to stop (it catches every exception, even the one that stops it), so "
                             "it was ended after {steps:,} steps. The steps up to there are shown."),
    "timeout.stopped": N_("The run was stopped on request after {steps:,} steps. The steps up to there are "
                          "shown."),
    "output.trace_stopped": N_("The snippet's trace is larger than {mib} MiB and was stopped."),
    "output.trace_cut": N_("The trace is larger than {mib} MiB; only the first {steps} steps are shown."),
    "memory.killed": N_("The system stopped the snippet, most likely because it used too much memory "
                        "(the playground allows {mib} MiB per run)."),
    "memory.limit": N_("The snippet ran out of memory: the playground allows {mib} MiB per run."),
    "memory.limit_detail": N_("The snippet ran out of memory: the playground allows {mib} MiB per run. "
                              "({detail})"),
    "rejected.syscall": N_("The snippet made a system call that the playground does not allow."),
    "rejected.file_write": N_("The snippet tried to write a file; the playground has no files to write."),
    "runtime.crash": N_("The snippet crashed its Python process ({signal})."),
    "runtime.process_exit": N_("The snippet ended its process (exit status {status}) before the trace was "
                               "complete."),
    "runtime.no_shared_memory": N_("{detail}\n(The playground's sandbox has no shared memory: "
                                   "share_memory_() and DataLoader workers cannot work here; use "
                                   "num_workers=0.)"),
    "runtime.no_cuda": N_("{detail}\n(The playground has no GPU. To run this code anyway, turn on “Run cuda "
                          "on the CPU” (`\"cuda_on_cpu\": true` in the API): what the code puts on cuda then "
                          "stays on the CPU, shown as `cuda:0`, simulated.)"),
    "runtime.cuda_not_simulated": N_("`{what}` is not simulated when cuda runs on the CPU: leave it out "
                                     "here, or run the code on a machine with a GPU (the memory chart "
                                     "beside the code shows what the run holds at each step, and what a "
                                     "GPU would report)."),
    "runtime.cuda_not_simulated_detail": N_("{detail}\n(This part of torch.cuda is not simulated when "
                                            "cuda runs on the CPU: leave it out here, or run the code on a "
                                            "machine with a GPU.)"),
    "runtime.no_files": N_("{detail}\n(The playground has no files to write or read: save to memory "
                           "instead, `buffer = io.BytesIO()`, `torch.save(obj, buffer)`, then "
                           "`buffer.seek(0)` and `torch.load(buffer)`.)"),
    "runtime.no_threads": N_("{detail}\n(The playground's sandbox runs a snippet in one process, on one "
                             "thread: no new processes or threads; use num_workers=0.)"),
    "internal.restarted": N_("The sandbox restarted while the snippet ran. Please run it again."),
    "internal.unusable": N_("The sandbox returned an unusable answer, so the run cannot be shown. Please "
                            "run it again."),
    "internal.unusable_frame": N_("The sandbox returned an unusable answer ({detail})."),
    "internal.unusable_schema": N_("The sandbox returned an unusable answer (it does not match the trace "
                                   "schema)."),
    # a schema-valid answer whose parts disagree (app/trace/consistency.py): {detail} says where and how
    "internal.unusable_trace": N_("The sandbox returned an unusable answer: {detail}. The {kept} steps "
                                  "before it are shown."),
    "internal.unusable_trace_whole": N_("The sandbox returned an unusable answer: {detail}. No step of it "
                                        "is shown."),
    "internal.process_failed": N_("The sandboxed process failed (status {status}) before it could answer."),
    "internal.worker_crashed": N_("The worker crashed (exit status {status})."),
    "internal.no_process": N_("The sandbox could not start a process for this run. Please try again."),
    "internal.unprotected_child": N_("A sandboxed process started without its protection; the run was "
                                     "refused."),
    "internal.unfinished": N_("The sandboxed process did not finish. Please run the snippet again."),
    "internal.not_running": N_("The sandbox is not running ({detail})."),
    "internal.unprotected": N_("The sandbox is missing required protection on this machine ({missing}), so "
                               "snippets are not run. Set EXPLORER_UNSAFE_DEV=1 only on a private "
                               "development machine."),
    # the engine (app/engine/run.py)
    "internal.tracer_failed": N_("The tracer failed: {detail}"),
    "output.printed_too_much": N_("The snippet printed more than {kib} KiB; output was cut there."),
    "memory.engine": N_("The snippet ran out of memory."),
    "untraced.recursion": N_("The snippet went on running where the tracer could not follow it: it ran out "
                             "of stack inside the tracer (recursion too deep). The steps shown end where "
                             "tracing stopped."),
    "untraced.caught": N_("The snippet went on running where the tracer could not follow it: the tracer "
                          "stopped ({type}) and the snippet caught it. The steps shown end where tracing "
                          "stopped."),
    # the web layer (app/web/pages.py, gates.py, api.py)
    "rejected.too_long": N_("The snippet is longer than {kb} KB, the limit."),
    "rejected.too_long_api": N_("The snippet is longer than {kb} KB."),
    "rejected.bad_form": N_("The form could not be read: send the fields code, step and view once each."),
    "rejected.no_code": N_("There is no code to run: type a snippet or pick an example."),
    "internal.rate": N_("You are running snippets faster than the playground allows. Please wait {seconds} "
                        "s."),
    "internal.busy": N_("The playground is busy right now. Please try again in a moment."),
    "output.v1_too_large": N_('This trace is about {size} in the v1 format, which repeats every tensor at '
                              'every step; the limit is {limit}. Ask for the delta format instead: '
                              '{{"code": ..., "format": "delta"}} (each step holds only what its line '
                              'changed).'),
    "output.server_budget": N_("The server stopped preparing this view: the server's {seconds:g} s budget "
                               "for this request ran out. The run itself finished; showing less."),
    "output.client_left": N_("The server stopped preparing this view: the client closed the connection. "
                             "The run itself finished; showing less."),
    "output.unusable_view": N_("The server could not prepare this view: the sandbox's answer is unusable "
                               "(its parts do not agree with each other) or too deep to draw."),
    # what a partial answer adds after its note when the run printed something: params["output"]
    "output.run_output": N_(" Output of the run:\n"),
    # the policy gate (app/policy.py): what is refused, said in a few shapes
    "policy.too_deep_or_large": N_("The snippet is nested too deeply (or is too large) to read: split it "
                                   "into smaller functions or steps."),
    "policy.too_deep": N_("The snippet is nested too deeply to read: split it into smaller functions or "
                          "steps."),
    "policy.too_long": N_("The snippet is too long for the playground (more than {nodes:,} pieces of "
                          "syntax). Try a shorter example."),
    "policy.too_deep_levels": N_("The snippet is nested too deeply (more than {depth} levels): split it "
                                 "into smaller functions or steps."),
    "policy.unavailable": N_("`{what}` is not available in the playground: keep what you need in variables "
                             "and build it with torch, numpy or your own functions instead."),
    "policy.module_attribute": N_("`{what}` (the module `{target}`) is not available in the playground: use "
                                  "what `{module}` "
                                  "offers directly, or import one of the modules the playground has."),
    "policy.module_import": N_("`{what}` (the module `{target}`) is not available in the playground: "
                               "import the names you need from one of the modules the playground has."),
    "policy.attribute_runtime": N_("`{call}` is not available in the playground: a name that starts with "
                                   "`_`, or an attribute of a module or of torch's own classes, is not set "
                                   "or deleted here. Use a name without the `_`, on your own objects "
                                   "(`setattr(self, f\"fc{{i}}\", layer)`)."),
    "policy.named_call": N_("`{name}` is only available called with an attribute name written in the "
                            "snippet: write `{name}(obj, \"name\", ...)`. Layers made in a loop go in an "
                            "nn.ModuleList or nn.ModuleDict (`self.layers[i]`, `self.heads[name]`)."),
    "policy.underscore_name": N_("Names starting with `__` (here `{name}`) are not available in the "
                                 "playground: give it a name without one, such as `{suggested}`."),
    "policy.dunder_method": N_("Defining `{name}` is not available in the playground: Python calls it on its "
                               "own (to read attributes, to make or copy objects). Write a plain method "
                               "and call it yourself (`def get(self, key): ...`)."),
    "policy.underscore_attribute": N_("Attributes starting with `_` (here `{name}`) are not available in the "
                                      "playground: use the public attributes and methods instead, and name "
                                      "your own class's attributes without the `_` (`self.value`); the "
                                      "explorer shows `._version`, `._base` and `grad_fn._saved_*` itself, "
                                      "and a snippet may read them too."),
    "policy.class_attribute": N_("`{name}` is not available in the playground: write `type(x)` for the "
                                 "class, or `x.__class__.__name__` (or `type(x).__name__`) for its name."),
    "policy.underscore_format": N_("Format fields that reach attributes starting with `_` (or the "
                                   "playground's refused ones) are not available in the playground: use an "
                                   "f-string."),
    "policy.module_passed": N_("The module `{module}` can only be used through its attributes here, not "
                               "passed around or stored: write `{module}.something` where you need it."),
    "policy.module_stored": N_("The module `{module}` can only be used through its attributes here, not "
                               "passed around or stored: write `{module}.something` where you need it."),
    "policy.change_module_attribute": N_("Changing `{what}` is not available in the playground: it belongs "
                                         "to a module. Keep your own value in a variable of the snippet."),
    "policy.change_module": N_("Changing `{what}` is not available in the playground: it is a module. Keep "
                               "your own value in a variable of the snippet."),
    "policy.format": N_("`.format` is only available on a string written in the snippet; an f-string works "
                        "too."),
    "policy.relative_import": N_("Relative imports are not available in the playground: import the modules "
                                 "by name (torch, numpy, math, ...)."),
    "policy.star_import": N_("`from {module} import *` is not available in the playground; import the names "
                             "you need."),
    "policy.import": N_("Importing `{module}` is not available in the playground. You can import torch "
                        "(torch.nn, torch.nn.functional, torch.autograd, torch.optim, "
                        "torch.optim.lr_scheduler, torch.amp, torch.utils.data, ...), numpy, math, random, "
                        "itertools, collections, copy, dataclasses, functools, typing, string, re, time, "
                        "unicodedata, warnings, gc, json, operator, abc, numbers, heapq, bisect, statistics, "
                        "pprint, textwrap, io (BytesIO), contextlib, types (SimpleNamespace), weakref, "
                        "datetime and cmath."),
    "policy.only_names.gc": N_("`{what}` is not available in the playground: of gc, use collect(), "
                               "get_count() and isenabled() (the explorer shows what each step keeps "
                               "alive)."),
    "policy.only_names.operator": N_("`{what}` is not available in the playground: it reads attributes by "
                                     "the names a string holds. Write a lambda instead (`lambda m: "
                                     "m.weight`)."),
    "policy.only_names.torch.overrides": N_("`{what}` is not available in the playground: of "
                                            "torch.overrides, use TorchFunctionMode and the "
                                            "*_torch_function helpers, as the \"Extending PyTorch\" notes "
                                            "do."),
    "policy.only_names.io": N_("`{what}` is not available in the playground: there are no files here. Of "
                               "io, use BytesIO and StringIO, files in memory (`buffer = io.BytesIO()`, "
                               "`torch.save(obj, buffer)`)."),
    "policy.only_names.torch.jit": N_("`{what}` is not available in the playground: TorchScript compiles a "
                                      "function from its source file, which a snippet has not (a plain "
                                      "Python run of the snippet fails the same way). Call the function "
                                      "directly, or record it with `torch.jit.trace(f, example_input)`."),
    "policy.only_names.torch.profiler": N_("`{what}` is not available in the playground: there are no files "
                                           "here. Of torch.profiler, use profile, record_function, "
                                           "ProfilerActivity and schedule, and print "
                                           "`prof.key_averages().table(...)`."),
    "policy.only_names.torch.autograd.profiler": N_("`{what}` is not available in the playground: of "
                                                    "torch.autograd.profiler, use profile and "
                                                    "record_function (or torch.profiler)."),
    "policy.serialization_called": N_("`{what}` is only available in the playground called where it is "
                                      "written: call it there, `torch.save(obj, buffer)`, "
                                      "`torch.load(buffer)`."),
    "policy.serialization_pickle": N_("`{what}` with `weights_only=False`, a `pickle_module` or unpacked "
                                      "arguments is not available in the playground: a pickle can name any "
                                      "class or function to call. Leave them out: tensors, state_dicts and "
                                      "plain containers of them load with torch's default, "
                                      "`weights_only=True`."),
    "policy.serialization_file": N_("`{what}` with a file name is not available in the playground: there "
                                    "are no files here. Write to memory instead: `buffer = io.BytesIO()`, "
                                    "`torch.save(obj, buffer)`, then `buffer.seek(0)` and "
                                    "`torch.load(buffer)`."),
    "policy.only_names.contextlib": N_("`{what}` is not available in the playground: print() writes to "
                                       "the output already. Of contextlib, use contextmanager, "
                                       "nullcontext, suppress, ExitStack and closing."),
    "policy.only_names.types": N_("`{what}` is not available in the playground: it makes functions or code "
                                  "from their parts. Of types, use SimpleNamespace; write a def or a "
                                  "class statement for the rest."),
    "policy.only_names.weakref": N_("`{what}` is not available in the playground: of weakref, use ref, "
                                    "proxy, finalize and the weak containers (WeakKeyDictionary, "
                                    "WeakValueDictionary, WeakSet, WeakMethod)."),
    "policy.only_names.torch.xpu": N_("`{what}` is not available in the playground: there is no XPU here. "
                                      "Check with `torch.xpu.is_available()` (False) and use the CPU."),
    # (policy_names.IMPORT_REWRITES: each root module's own way forward)
    "policy.import_instead.os": N_("Importing `{module}` is not available in the playground: snippets have "
                                   "no files or operating system to reach. Put the data the code needs in "
                                   "the snippet."),
    "policy.import_instead.pathlib": N_("Importing `{module}` is not available in the playground: there are "
                                        "no files here. Put the data the code needs in the snippet."),
    # (the name-classification and seq2seq tutorials: ``from io import open``, ``import glob``)
    "policy.import_instead.glob": N_("Importing `{module}` is not available in the playground: there are "
                                     "no files here. Put the data the code needs in the snippet."),
    "policy.import_instead.sys": N_("Importing `{module}` is not available in the playground: print() writes "
                                    "to the output already; leave the rest out."),
    "policy.import_instead.matplotlib": N_("Importing `{module}` is not available in the playground: nothing "
                                           "is plotted here but the explorer's own views. Print the numbers "
                                           "you want to see."),
    "policy.import_instead.torchvision": N_("Importing `{module}` is not available in the playground: "
                                            "nothing is downloaded here. Make the data with torch (a batch "
                                            "of images: `torch.randn(8, 3, 32, 32)`) and the model with "
                                            "torch.nn."),
    "policy.import_instead.torchaudio": N_("Importing `{module}` is not available in the playground: nothing "
                                           "is downloaded here. Make the data with torch (`torch.randn`) and "
                                           "the model with torch.nn."),
    "policy.import_instead.torchtext": N_("Importing `{module}` is not available in the playground: nothing "
                                          "is downloaded here. Make the data with torch (token ids: "
                                          "`torch.randint(0, 100, (4, 10))`) and the model with torch.nn."),
    "policy.import_instead.tqdm": N_("Importing `{module}` is not available in the playground: loop over the "
                                     "data directly (and print the progress, if you like)."),
    "policy.import_instead.zipfile": N_("Importing `{module}` is not available in the playground: there are "
                                        "no files here. Put the data the code needs in the snippet."),
    "policy.import_instead.tarfile": N_("Importing `{module}` is not available in the playground: there are "
                                        "no files here. Put the data the code needs in the snippet."),
    "policy.import_instead.shutil": N_("Importing `{module}` is not available in the playground: there are "
                                       "no files here. Put the data the code needs in the snippet."),
    "policy.import_instead.tempfile": N_("Importing `{module}` is not available in the playground: there "
                                         "are no files here. Put the data the code needs in the snippet."),
    "policy.import_instead.subprocess": N_("Importing `{module}` is not available in the playground: "
                                           "snippets have no files or operating system to reach. Put the "
                                           "data the code needs in the snippet."),
    "policy.import_instead.argparse": N_("Importing `{module}` is not available in the playground: there is "
                                         "no command line here. Put the settings in variables (`batch_size "
                                         "= 64`) or in a `@dataclass`."),
    "policy.import_instead.logging": N_("Importing `{module}` is not available in the playground: write "
                                        "`print(...)` where the code logs; it shows in the output."),
    "policy.import_instead.timeit": N_("Importing `{module}` is not available in the playground: it runs "
                                       "code given as a string. Use `time.perf_counter()` around the code "
                                       "itself."),
    "policy.import_instead.enum": N_("Importing `{module}` is not available in the playground: use plain "
                                     "constants (`TRAIN, EVAL = 0, 1`) or strings instead."),
    "policy.import_instead.pickle": N_("Importing `{module}` is not available in the playground: nothing is "
                                       "saved or loaded here. Keep the object in a variable "
                                       "(`copy.deepcopy` makes a copy)."),
    "policy.import_instead.requests": N_("Importing `{module}` is not available in the playground: nothing "
                                         "is downloaded here. Put the data the code needs in the snippet."),
    "policy.import_instead.urllib": N_("Importing `{module}` is not available in the playground: nothing is "
                                       "downloaded here. Put the data the code needs in the snippet."),
    "policy.import_instead.PIL": N_("Importing `{module}` is not available in the playground: there are no "
                                    "image files here. Make the image with torch (`torch.rand(3, 32, 32)`)."),
    "policy.import_instead.pandas": N_("Importing `{module}` is not available in the playground: put the "
                                       "data in the snippet as lists or tensors (`torch.tensor([[1.0, 2.0], "
                                       "[3.0, 4.0]])`)."),
    "policy.import_instead.sklearn": N_("Importing `{module}` is not available in the playground: make the "
                                        "data and the metrics with torch (`(pred == y).float().mean()` is "
                                        "the accuracy)."),
    "policy.import_instead.scipy": N_("Importing `{module}` is not available in the playground: use torch "
                                      "or numpy instead (torch.special, torch.linalg, torch.fft, numpy)."),
    "policy.import_instead.IPython": N_("Importing `{module}` is not available in the playground: print() "
                                        "shows the values in the output."),
    "policy.import_instead.seaborn": N_("Importing `{module}` is not available in the playground: nothing "
                                        "is plotted here but the explorer's own views. Print the numbers "
                                        "you want to see."),
    "policy.import_instead.inspect": N_("Importing `{module}` is not available in the playground: print the "
                                        "object itself, or its documented attributes."),
    "policy.import_instead.threading": N_("Importing `{module}` is not available in the playground: it runs "
                                          "on one thread. Call the function directly."),
    "policy.import_instead.gym": N_("Importing `{module}` is not available in the playground: there are no "
                                    "environments here. Make the states and rewards with torch (`state = "
                                    "torch.rand(4)`)."),
    "policy.import_instead.gymnasium": N_("Importing `{module}` is not available in the playground: there "
                                          "are no environments here. Make the states and rewards with torch "
                                          "(`state = torch.rand(4)`)."),
    "policy.import_instead.wandb": N_("Importing `{module}` is not available in the playground: print the "
                                      "values you would log (the explorer shows each step's tensors "
                                      "itself)."),
    "policy.import_instead.transformers": N_("Importing `{module}` is not available in the playground: "
                                             "nothing is downloaded here. Build a small model with torch.nn "
                                             "(nn.TransformerEncoder, nn.MultiheadAttention)."),
    "policy.import_instead.datasets": N_("Importing `{module}` is not available in the playground: nothing "
                                         "is downloaded here. Make the data with torch (`torch.randn`, "
                                         "`torch.randint`)."),
    "policy.import_instead.h5py": N_("Importing `{module}` is not available in the playground: there are no "
                                     "files here. Put the data the code needs in the snippet."),
    "policy.import_instead.cv2": N_("Importing `{module}` is not available in the playground: there are no "
                                    "image files here. Make the image with torch (`torch.rand(3, 32, 32)`)."),
    "policy.import_runtime": N_("Importing `{module}` is not available in the playground: import one of the "
                                "playground's modules instead."),
    "policy.type_class": N_("Creating classes with `type(name, bases, dict)` is not available in the "
                            "playground; use a class statement."),
    "policy.type_of_class": N_("`type()` of a class (its metaclass) is not available in the playground, "
                               "since it makes classes from a dict: compare classes with `is` or "
                               "`issubclass`, and use a class statement to make one."),
    "policy.metaclass": N_("`{what}` makes classes from a dict of names, which is not available in the "
                           "playground: use a class statement."),
    "policy.async": N_("`async` code is not available in the playground: write the same code without "
                       "`async` and `await`."),
    "policy.match": N_("`match` statements are not available in the playground: use `if`/`elif` (with "
                       "`isinstance` for class patterns)."),
    # what to write instead, for the refusals learners meet most (policy.REWRITES)
    "policy.instead.save": N_("`{what}` is not available in the playground: there are no files here. Keep "
                              "the object in a variable, or save it to memory: `buffer = io.BytesIO()`, "
                              "`torch.save(obj, buffer)`."),
    "policy.instead.load": N_("`{what}` is not available in the playground: there are no files here. Build "
                              "the object in the snippet, or load what `torch.save(obj, buffer)` wrote to "
                              "`buffer = io.BytesIO()`: `buffer.seek(0)`, `torch.load(buffer)`."),
    "policy.instead.from_file": N_("`{what}` is not available in the playground: build the tensor in the "
                                   "snippet."),
    "policy.instead.hub": N_("`{what}` is not available in the playground: nothing is downloaded here: "
                             "build the model in "
                             "the snippet."),
    "policy.instead.open": N_("`{what}` is not available in the playground: there are no files here: put "
                              "the data in the "
                              "snippet."),
    "policy.instead.eval": N_("`{what}` is not available in the playground: write the code itself."),
    "policy.instead.exec": N_("`{what}` is not available in the playground: write the code itself."),
    "policy.instead.compile": N_("`{what}` is not available in the playground: it compiles the code into "
                                 "kernels that run past the line-by-line trace (and needs a compiler the "
                                 "sandbox has not). Leave it out and call the model or function itself "
                                 "(`model = torch.compile(model)` → `model`): it computes the same."),
    "policy.instead.jit": N_("`{what}` is not available in the playground: call the function directly, or "
                             "record it with `torch.jit.trace(f, example_input)`."),
    "policy.instead.os": N_("`{what}` is not available in the playground: snippets have no access to the "
                            "operating system. Put the data the code needs in the snippet."),
    "policy.instead.sys": N_("`{what}` is not available in the playground: snippets have no access to the "
                             "interpreter. Leave the line out (print() writes to the output already)."),
    "policy.instead.multiprocessing": N_("`{what}` is not available in the playground: use DataLoader(..., "
                                         "num_workers=0)."),
    "policy.instead.set_num_threads": N_("`{what}` is not available in the playground: the playground runs "
                                         "on one thread. Leave the call out."),
    "policy.instead.set_num_interop_threads": N_("`{what}` is not available in the playground: the "
                                                 "playground runs on one thread. Leave the call out."),
    "policy.instead.input": N_("`{what}` is not available in the playground: assign the value in the "
                               "snippet."),
    "policy.instead.help": N_("`{what}` is not available in the playground: print the documentation "
                              "instead (`print(torch.add.__doc__)`)."),
    "policy.instead.breakpoint": N_("`{what}` is not available in the playground: the explorer shows every "
                                    "step's variables itself; print what you want to check."),
    "policy.instead.exit": N_("`{what}` is not available in the playground: end the snippet there, or put "
                              "the rest under an `if`."),
    "policy.instead.quit": N_("`{what}` is not available in the playground: end the snippet there, or put "
                              "the rest under an `if`."),
    "policy.instead.memoryview": N_("`{what}` is not available in the playground: use `bytes(...)` or a "
                                    "numpy array (`t.numpy()`) to look at the memory."),
    "policy.instead.__import__": N_("`{what}` is not available in the playground: write an import statement "
                                    "(`import math`)."),
    "policy.instead.globals": N_("`{what}` is not available in the playground: use the variable's name."),
    "policy.instead.locals": N_("`{what}` is not available in the playground: use the variable's name."),
    "policy.instead.vars": N_("`{what}` is not available in the playground: use the attribute itself, or a "
                              "dict."),
    "policy.instead.get_type_hints": N_("`{what}` is not available in the playground: it runs annotations "
                                        "written as strings as code. Read the annotation itself, written as "
                                        "a type (`x: torch.Tensor`)."),
    "policy.instead.ForwardRef": N_("`{what}` is not available in the playground: it turns a string into "
                                    "code. Use the class itself once it is defined."),
    "policy.instead.singledispatch": N_("`{what}` is not available in the playground: it runs annotations "
                                        "as code. Choose the branch with `isinstance` instead."),
    "policy.instead.singledispatchmethod": N_("`{what}` is not available in the playground: it runs "
                                              "annotations as code. Choose the branch with `isinstance` "
                                              "instead."),
    "policy.instead.Formatter": N_("`{what}` is not available in the playground: it reads attributes by the "
                                   "names a string holds. Use an f-string."),
    "policy.instead.make_dataclass": N_("`{what}` is not available in the playground: it makes a class from "
                                        "a dict of names. Write a class statement with `@dataclass`."),
    "policy.instead.tensorboard": N_("`{what}` is not available in the playground: print the values you "
                                     "would log (the explorer shows each step's tensors itself)."),
    "policy.instead.benchmark": N_("`{what}` is not available in the playground: it runs code given as a "
                                   "string. Use `time.perf_counter()` around the code itself."),
    "policy.instead.onnx": N_("`{what}` is not available in the playground: nothing is exported here. Call "
                              "the model directly (`model(x)`) to see what it computes."),
    "policy.instead.export": N_("`{what}` is not available in the playground: nothing is exported here. "
                                "Call the model directly (`model(x)`) to see what it computes."),
    "policy.instead.fx": N_("`{what}` is not available in the playground: the explorer draws the graph "
                            "itself. Call the model directly (`model(x)`) and look at its steps."),
    "policy.instead.distributed": N_("`{what}` is not available in the playground: it runs in one process "
                                     "on one CPU. Call the model directly, without the distributed wrapper."),
    "policy.instead.cpp_extension": N_("`{what}` is not available in the playground: nothing is compiled "
                                       "here. Write the operation with torch functions (and a "
                                       "torch.autograd.Function for its backward)."),
    "policy.instead.library": N_("`{what}` is not available in the playground: write the operation as a "
                                 "Python function of torch calls (and a torch.autograd.Function for its "
                                 "backward)."),
    "policy.instead.ops": N_("`{what}` is not available in the playground: call the public torch function "
                             "(`torch.add`, `F.relu`...) instead."),
    "policy.instead.fromfile": N_("`{what}` is not available in the playground: there are no files here: "
                                  "put the data in the snippet."),
    "policy.instead.tofile": N_("`{what}` is not available in the playground: there are no files here: "
                                "print the values instead."),
    "policy.instead.memmap": N_("`{what}` is not available in the playground: there are no files here: make "
                                "the array in memory (`np.zeros`)."),
    "policy.instead.profiler": N_("`{what}` is not available in the playground: the explorer shows each "
                                  "step's memory and graph itself; to time a loop, use "
                                  "`time.perf_counter()`."),
}


# What torch says when code asks for a GPU this build or machine does not have.
NO_CUDA_MARKERS = ("not compiled with cuda enabled", "found no nvidia driver", "no cuda gpus are available")


class SaidError(Exception):
    """An error our own code raises inside a snippet's run (the builtins a gated snippet gets, the cuda
    on the CPU simulation), said by message code: the engine reports its ``code`` and ``params``, so
    the page says it in the reader's language. ``shown_type`` is the Python error it stands for."""

    kind = "runtime"
    shown_type = "RuntimeError"

    def __init__(self, code: str, params: Mapping[str, Param] | None = None) -> None:
        self.code = code
        self.params = dict(params or {})
        super().__init__(english(code, self.params))


class RefusedType(SaidError, TypeError):
    """A call the gated ``type`` refuses at run time (``app.policy``)."""

    kind = "rejected"
    shown_type = "TypeError"


class RefusedAttribute(SaidError, AttributeError):
    """A ``setattr``/``delattr`` with a computed name that the gated builtins refuse at run time."""

    kind = "rejected"
    shown_type = "AttributeError"


def said(error: BaseException, line: int | None, cuda_on_cpu: bool = False) -> dict | None:
    """A snippet's error in our words, where we have some: our own errors, and torch's bare word that
    there is no CUDA (with the way forward: the cuda-on-CPU option, or, when it is on, what it does not
    simulate). None: torch's or Python's own text stands."""
    if isinstance(error, SaidError):
        return error_dict(error.kind, error.shown_type, error.code, error.params, line)
    text = str(error)
    told = isinstance(error, AssertionError | RuntimeError | TypeError)  # (a legacy cuda type: TypeError)
    if told and any(marker in text.lower() for marker in NO_CUDA_MARKERS):
        code = "runtime.cuda_not_simulated_detail" if cuda_on_cpu else "runtime.no_cuda"
        return error_dict("runtime", type(error).__name__, code, {"detail": text[:1000]}, line)
    return None


def english(code: str, params: Mapping[str, Param] | None = None) -> str:
    """The English text of a message (what ``RunError.message`` holds)."""
    return TEMPLATES[code].format(**(params or {}))


@dataclass(frozen=True)
class Message:
    """A message said by code, before the language it will be read in is known."""

    code: str
    params: dict[str, Param] = field(default_factory=dict)

    def __str__(self) -> str:
        return english(self.code, self.params)


def error_dict(kind: str, error_type: str, code: str, params: Mapping[str, Param] | None = None,
               line: int | None = None) -> dict:
    """A ``RunError`` as the sandbox's child and the engine write it (plain data)."""
    params = dict(params or {})
    return {"kind": kind, "type": error_type, "message": english(code, params)[:4000], "line": line,
            "code": code, "params": params}


__all__ = ["TEMPLATES", "Message", "Param", "RefusedAttribute", "RefusedType", "SaidError", "english",
           "error_dict", "said"]
