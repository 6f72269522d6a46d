# Copyright: sparkfleet contributors
# Apache License 2.0
"""The smoke step: a program of its own, run by the Python interpreter under test (a venv's, or an image's through
its launcher), that trains a tiny causal LM for a few dozen steps and must learn.

"It ran" is not proof: a job can run to its end and learn nothing (a flat loss, an exploding gradient norm). So
this builds a tiny Llama from a config in code (random weights, a fixed seed: nothing is downloaded), attaches
LoRA with peft (where an old torchao makes peft refuse), quantizes the base to 4 bits through bitsandbytes where
it is installed and a GPU is there, compiles one Triton kernel where Triton and a GPU are, and runs the steps on
a fixed batch. It passes only when the loss falls by the stated margin, every gradient norm is finite and no
value is NaN. Where Unsloth is installed it is imported first (it patches transformers, peft and trl) and its own
path runs too (its loader on the same tiny model saved to a folder, its LoRA, the same steps), judged the same way.

Every blocker in one run: without the GPU asked for, without a 4-bit base, a Triton kernel or Unsloth, the rest
still runs (on the CPU where there is no GPU) and the verdict names each blocker it met; it stays failed.

spark_smoke_train sends this file's source on stdin; options follow "-" on the command line. It prints one JSON
object per line as it goes (the stage it reached first), so a run that hangs or dies leaves its stage behind.
Written for any Python 3 an image may carry: no f-strings, no annotations.
"""

import json
import math
import os
import re
import sys
import time

STAGES = ("headroom", "import", "unsloth", "build", "quantize", "lora", "compile", "step", "learning")


def emit(kind, **data):
    data["kind"] = kind
    sys.stdout.write(json.dumps(data) + "\n")
    sys.stdout.flush()


def options(argv):
    found = {"steps": 40, "lr": 0.01, "min_drop": 0.05, "headroom_mb": 2048, "device": "auto",
             "shuffle_labels": False}
    index = 0
    while index < len(argv):
        key = argv[index].lstrip("-").replace("-", "_")
        if key == "shuffle_labels":
            found[key] = True
        elif key in found:
            index += 1
            found[key] = type(found[key])(argv[index])
        index += 1
    return found


def mem_available_mb():
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def installed(name):
    try:
        from importlib import metadata
        return metadata.version(name)
    except Exception:
        return None


def import_fix(exc):
    """What to do when torch or transformers does not import: where the package is not installed, install the stack;
    where it is, but is not what it says (a name the real one has is missing: a test bed's stand-in wheel, a broken
    or partial install), the installed version is named and reinstalling it is the fix."""
    missing = getattr(exc, "name", None) if isinstance(exc, ImportError) else None
    top = (missing or "").split(".")[0]
    if isinstance(exc, ModuleNotFoundError) and top and not installed(top):
        return ("%s is not installed in this interpreter: install the matrix's stack (role spark_venv) or use the "
                "NGC/Unsloth container" % top)
    text = str(exc)
    found = re.search(r"cannot import name '([^']+)' from '([^'.]+)", text)
    package = found.group(2) if found else top
    version = installed(package) if package else None
    if version:
        return ("%s %s is installed but is not a working build of it (%s): a stand-in wheel (a test bed's index) or "
                "a broken install; reinstall the matrix's pin from its index (sparkfleet provision builds the venv "
                "anew)" % (package, version, "no %s" % found.group(1) if found else type(exc).__name__))
    return "install the matrix's stack (role spark_venv) or use the NGC/Unsloth container"


TRITON_KERNEL = """
import triton
import triton.language as tl


@triton.jit
def scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2.0, mask=mask)
"""


# A CPU exercise, for the tests alone (as the GPU probe's): the compile stage's own kernel and judgement run on
# torch's CPU tensors under Triton's interpreter (TRITON_INTERPRET=1), so the stage is tested without a GPU. Nothing
# on a host switches it on - no variable, file or argument is read for it: a test runs this program's source with
# the line below changed (tests/integration/test_spark_smoke_train.py). A run on the CPU is never a GPU verification.
ON_CPU = False


def compile_triton(torch):
    import importlib
    import tempfile
    folder = tempfile.mkdtemp(prefix="sparkfleet-smoke-")
    with open(os.path.join(folder, "sparkfleet_smoke_kernel.py"), "w") as handle:
        handle.write(TRITON_KERNEL)
    sys.path.insert(0, folder)
    try:
        kernel = importlib.import_module("sparkfleet_smoke_kernel")
    finally:
        sys.path.remove(folder)
    x = torch.ones(64, device="cpu" if ON_CPU else "cuda")
    out = torch.empty_like(x)
    kernel.scale[(1,)](x, out, 64, BLOCK=64)
    if not ON_CPU:
        torch.cuda.synchronize()
    return float(out.sum().item())


TRITON_EXPECTED = 128.0  # the kernel doubles 64 ones


BLOCKERS = []


def blocked(stop):
    """A blocker the rest of the run can go on past (no GPU, the 4-bit base, the Triton kernel): kept, named in
    the verdict beside any other, and the verdict is failed."""
    BLOCKERS.append({"stage": stop.stage, "error": str(stop), "fix": stop.fix})
    emit("blocker", stage=stop.stage, error=str(stop))


class Stop(Exception):
    """The stage the smoke step stopped at, the library's own words (str), the fix, and what it measured."""

    def __init__(self, stage, error, fix, data=None):
        Exception.__init__(self, error)
        self.stage = stage
        self.fix = fix
        self.data = data or {}


def plain_steps(torch, model, tokens, opts, config, generator, device):
    """The steps in a plain loop: AdamW over the LoRA parameters, the same batch each step (or, to prove that a
    run that cannot learn is judged so, new random labels each step)."""
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=opts["lr"])
    losses, norms = [], []
    for step in range(opts["steps"]):
        labels = tokens
        if opts["shuffle_labels"]:  # a run that cannot learn: new targets every step
            labels = torch.randint(0, config.vocab_size, tokens.shape, generator=generator).to(device)
        try:
            loss = model(input_ids=tokens, labels=labels).loss
            optimizer.zero_grad()
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1e9)
            optimizer.step()
        except Exception as exc:
            raise Stop("step", "step %d: %s: %s" % (step, type(exc).__name__, str(exc)[-600:]),
                       "a failure inside a training step on this stack: check the ABI scan and the GPU line") from exc
        losses.append(float(loss.item()))
        norms.append(float(norm.item()))
    return losses, norms


def make_tokenizer():
    """A tokenizer made here (nothing is downloaded): the dataset is tokens already, trl and Unsloth only ask for
    one."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast
    vocab = {str(i): i for i in range(256)}
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab=vocab, unk_token="0")),
                                   pad_token="0", eos_token="1")


def learned(losses, norms, opts):
    """What the losses did ({first_loss, last_loss, drop}) and, when the run did not learn, (error, fix)."""
    bad = [v for v in losses + norms if not math.isfinite(v)]
    window = max(1, min(5, len(losses) // 3))
    first, last = sum(losses[:window]) / window, sum(losses[-window:]) / window
    summary = {"first_loss": round(first, 4), "last_loss": round(last, 4),
               "drop": round(1 - last / first, 4) if first else None}
    if bad:
        return summary, ("a loss or gradient norm is not finite (%s) after %d steps" % (bad[0], len(losses)),
                         "a run that diverges learns nothing: check the stack's versions against the matrix")
    if not first or last > first * (1 - opts["min_drop"]):
        return summary, ("the loss did not fall by %d%%: %.4f -> %.4f over %d steps (lr %s)" % (
            round(opts["min_drop"] * 100), first, last, len(losses), opts["lr"]),
            "a run that does not learn proves nothing: check the learning rate and the stack against the matrix "
            "(NVIDIA/dgx-spark-playbooks#85 trained a broken model that ran to its end)")
    return summary, None


UNSLOTH_NO_GPU = "Unsloth cannot find any torch accelerator"
# Unsloth 2026.10 and later: without a GPU it selects its CPU backend and trains there (it prints "no GPU found,
# training on CPU"), unless UNSLOTH_DISABLE_CPU_FALLBACK=1, which the smoke step sets (and the venv's environment).
UNSLOTH_CPU_BACKEND = "Unsloth selected its CPU backend (no GPU found, training on CPU)"


def unsloth_fix(text):
    if UNSLOTH_NO_GPU in text or UNSLOTH_CPU_BACKEND in text:
        return "Unsloth runs only on a GPU: fix the GPU line first (sparkfleet verify); this is no verification"
    if "No module named" in text:
        return ("a package Unsloth imports is not installed (its step installs it --no-deps): install what the "
                "venv's pip check lists as missing (the matrix's deps step), or use the Unsloth container")
    return ("check unsloth and unsloth_zoo against the matrix's torch, transformers, peft and trl (their metadata "
            "says which versions they support: sparkfleet matrix check)")


def unsloth_steps(torch, config, tokens, opts, device):
    """Unsloth's own path on the tiny model: saved from its config into a folder of its own, loaded by Unsloth's
    loader, its LoRA attached, the steps in a plain loop; judged as the peft path is."""
    import tempfile

    from transformers import LlamaForCausalLM
    from unsloth import FastLanguageModel
    folder = tempfile.mkdtemp(prefix="sparkfleet-smoke-unsloth-")
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    make_tokenizer().save_pretrained(folder)
    model, _tokenizer = FastLanguageModel.from_pretrained(model_name=folder, max_seq_length=64, dtype=None,
                                                          load_in_4bit=False, local_files_only=True)
    model = FastLanguageModel.get_peft_model(model, r=8, lora_alpha=16, lora_dropout=0, bias="none",
                                             target_modules=["q_proj", "v_proj"], random_state=0,
                                             use_gradient_checkpointing=False)
    generator = torch.Generator().manual_seed(0)
    return plain_steps(torch, model, tokens.to(device), opts, config, generator, device)


def trl_steps(torch, model, tokens, opts, cuda, parts):
    """The steps through trl's SFTTrainer, as a fine-tuning job runs them: the same batch each step (a dataset of
    the fixed tokens), a constant learning rate, no clipping; its logs give each step's loss and gradient norm.
    A trainer that cannot be built or run is this stack's failure, named in trl's words."""
    import contextlib
    import tempfile

    try:
        import trl
        from datasets import Dataset
        from transformers import TrainerCallback
    except Exception as exc:
        raise Stop("step", "trl's trainer cannot be imported: %s: %s" % (type(exc).__name__, str(exc)[-600:]),
                   "install trl with the versions of transformers and datasets it asks for (the matrix's stack "
                   "step), or remove it") from exc
    parts["loop"] = "trl SFTTrainer %s" % trl.__version__
    losses, norms = [], []

    class Record(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                losses.append(float(logs["loss"]))
                if logs.get("grad_norm") is not None:
                    norms.append(float(logs["grad_norm"]))

    tokenizer = make_tokenizer()
    try:
        with contextlib.redirect_stdout(sys.stderr):  # the trainer's own logs: stdout is this program's
            config = trl.SFTConfig(output_dir=tempfile.mkdtemp(prefix="sparkfleet-smoke-trl-"),
                                   max_steps=opts["steps"], per_device_train_batch_size=tokens.shape[0],
                                   learning_rate=opts["lr"], lr_scheduler_type="constant", warmup_steps=0,
                                   max_grad_norm=1e9, logging_steps=1, report_to=[], save_strategy="no",
                                   use_cpu=not cuda, seed=0, dataloader_num_workers=0, disable_tqdm=True)
            trainer = trl.SFTTrainer(model=model, args=config, processing_class=tokenizer, callbacks=[Record()],
                                     train_dataset=Dataset.from_dict({"input_ids": tokens.cpu().tolist()}))
            trainer.train()
    except Exception as exc:
        raise Stop("step", "trl's SFTTrainer: %s: %s" % (type(exc).__name__, str(exc)[-600:]),
                   "check trl, transformers and datasets against the matrix (trl's own metadata says which "
                   "versions it needs)") from exc
    return losses, norms


def run(opts):
    before = mem_available_mb()
    emit("stage", stage="headroom", mem_available_mb=before)
    if before is not None and before < opts["headroom_mb"]:
        raise Stop("headroom", "MemAvailable is %d MiB, below the %d MiB headroom the smoke step keeps" % (
            before, opts["headroom_mb"]), "free memory (a training job, a cached model) or lower the headroom")
    emit("stage", stage="import")
    unsloth = installed("unsloth")
    if unsloth:
        # Before transformers, peft and trl: Unsloth patches them, as in a fine-tuning job that uses it.
        emit("stage", stage="unsloth")
        # Never Unsloth's CPU fallback, whatever the environment says: a smoke step on the CPU proves nothing.
        os.environ["UNSLOTH_DISABLE_CPU_FALLBACK"] = "1"
        try:
            import unsloth as _unsloth
        except BaseException as exc:  # its own refusal (no GPU) is a NotImplementedError
            text = "%s: %s" % (type(exc).__name__, " ".join(str(exc).split())[-600:])
            blocked(Stop("unsloth", text, unsloth_fix(text)))
            unsloth = None
        else:
            if getattr(_unsloth, "DEVICE_TYPE", None) == "cpu":  # forced (UNSLOTH_FORCE_CPU) or an older switch
                blocked(Stop("unsloth", UNSLOTH_CPU_BACKEND, unsloth_fix(UNSLOTH_CPU_BACKEND)))
                unsloth = None
    try:
        import torch
        import transformers
        from transformers import LlamaConfig, LlamaForCausalLM
    except Exception as exc:
        raise Stop("import", "%s: %s" % (type(exc).__name__, exc), import_fix(exc)) from exc
    try:
        import peft
    except Exception as exc:
        raise Stop("import", "peft: %s: %s" % (type(exc).__name__, exc),
                   "install the matrix's peft (role spark_venv's first step)") from exc
    cuda = opts["device"] != "cpu" and torch.cuda.is_available()
    if opts["device"] == "cuda" and not cuda:
        # Every blocker in one run: the rest runs on the CPU (the imports, the LoRA attach, the trainer, the steps),
        # each blocker it meets named beside this one; the verdict stays failed.
        blocked(Stop("import", "torch sees no GPU (torch.cuda.is_available() is False)",
                     "fix the GPU line first (sparkfleet verify): the smoke step is asked to run on the GPU"))
    device = "cuda" if cuda else "cpu"
    parts = {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
             "torchao": installed("torchao"), "trl": installed("trl"), "bitsandbytes": installed("bitsandbytes"),
             "triton": installed("triton") if cuda or ON_CPU else None, "loop": "plain", "unsloth": unsloth}
    emit("stage", stage="build", device=device, parts=parts)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64)
    quantized, model = False, None
    if cuda and parts["bitsandbytes"]:
        emit("stage", stage="quantize")
        try:
            import tempfile

            from transformers import BitsAndBytesConfig
            folder = tempfile.mkdtemp(prefix="sparkfleet-smoke-model-")
            LlamaForCausalLM(config).save_pretrained(folder)
            model = LlamaForCausalLM.from_pretrained(folder, quantization_config=BitsAndBytesConfig(
                load_in_4bit=True, bnb_4bit_compute_dtype=torch.float32), device_map={"": 0})
            quantized = True
        except Exception as exc:
            blocked(Stop("quantize", "%s: %s" % (type(exc).__name__, str(exc)[-600:]),
                         "bitsandbytes works out of the box from 0.49.2 (a CUDA 13 build); reinstall it from the "
                         "matrix"))
    if model is None:  # the rest goes on with the base in full precision
        model = LlamaForCausalLM(config).to(device)
    parts["quantized_4bit"] = quantized
    emit("stage", stage="lora")
    try:
        model = peft.get_peft_model(model, peft.LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0,
                                                           target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    except Exception as exc:
        text = "%s: %s" % (type(exc).__name__, str(exc)[-600:])
        fix = ("upgrade torchao last, as the bare-pip sequence's third step does: pip install -U "
               "\"torchao==0.17.0\" (the torchao in the NGC base image is too old for peft's LoRA attach)"
               if "torchao" in text else "check the versions of peft and transformers against the matrix")
        raise Stop("lora", text, fix) from exc
    if (cuda or ON_CPU) and parts["triton"]:
        emit("stage", stage="compile")
        parts["triton_kernel"] = False
        try:
            value = compile_triton(torch)
        except Exception as exc:
            blocked(Stop("compile", "%s: %s" % (type(exc).__name__, str(exc)[-600:]),
                         "set TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas and retry"))
        else:
            parts["triton_kernel"] = value == TRITON_EXPECTED
            if not parts["triton_kernel"]:
                blocked(Stop("compile", "the Triton kernel computed %r, expected %r" % (value, TRITON_EXPECTED),
                             "check dmesg and nvidia-smi for GPU errors, then the triton and torch pins"))
    emit("stage", stage="step")
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, config.vocab_size, (4, 32), generator=generator).to(device)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    started = time.time()
    # Through trl's trainer where trl is installed (what a fine-tuning job runs: SFTTrainer over the LoRA model),
    # else a plain loop; labels shuffled every step (a run that cannot learn, for the tests) need the loop.
    if parts["trl"] and installed("datasets") and not opts["shuffle_labels"]:
        losses, norms = trl_steps(torch, model, tokens, opts, cuda, parts)
    else:
        losses, norms = plain_steps(torch, model, tokens, opts, config, generator, device)
    seconds = time.time() - started
    after = mem_available_mb()
    result = {"device": device, "steps": opts["steps"], "lr": opts["lr"], "losses": [round(v, 4) for v in losses],
              "grad_norm_max": max(norms) if norms else None,
              "seconds_per_step": round(seconds / max(1, opts["steps"]), 4),
              "peak_gpu_memory_mb": round(torch.cuda.max_memory_allocated() / 2 ** 20, 1) if cuda else None,
              "mem_available_mb": {"before": before, "after": after}, "parts": parts}
    summary, problem = learned(losses, norms, opts)
    result.update(summary)
    if problem:
        raise Stop("learning", problem[0], problem[1], result)
    if unsloth:
        emit("stage", stage="unsloth")
        try:
            unsloth_losses, unsloth_norms = unsloth_steps(torch, config, tokens, opts, device)
        except Stop as stop:
            blocked(Stop("unsloth", str(stop), unsloth_fix(str(stop))))
        except Exception as exc:
            text = "%s: %s" % (type(exc).__name__, " ".join(str(exc).split())[-600:])
            blocked(Stop("unsloth", text, unsloth_fix(text)))
        else:
            summary, problem = learned(unsloth_losses, unsloth_norms, opts)
            result["unsloth"] = dict(summary, losses=[round(v, 4) for v in unsloth_losses])
            if problem:
                blocked(Stop("unsloth", "Unsloth's path: " + problem[0], problem[1]))
    return result


def main():
    # Whatever loads jax here (transformers does where it is installed) does not take 75% of the GPU's memory,
    # which on a Spark is the memory the whole host lives on.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    opts = options(sys.argv[1:])
    emit("smoke", options=opts)
    try:
        result = run(opts)
    except Stop as stop:
        blockers = [*BLOCKERS, {"stage": stop.stage, "error": str(stop), "fix": stop.fix}]
        first = blockers[0]
        emit("verdict", **dict(stop.data, verdict="failed", stage=first["stage"], error=first["error"],
                               fix=first["fix"], blockers=blockers))
        return
    if BLOCKERS:  # it ran to its end past them: what it measured, and failed with each of them
        first = BLOCKERS[0]
        emit("verdict", **dict(result, verdict="failed", stage=first["stage"], error=first["error"],
                               fix=first["fix"], blockers=BLOCKERS))
        return
    emit("verdict", verdict="ok", stage=None, error=None, fix=None, blockers=[], **result)


if __name__ == "__main__":
    main()
