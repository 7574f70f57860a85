"""Training: the accelerate loop shared by the base, continual-pretraining and SFT stages, and what they need.

loop.train(model, loop, make_batch, n_rows, seed, accelerator, ckpt_dir, fingerprint, log) -> (model, LoopState)
loop.make_accelerator(device)                  CPU or GPU; the same code under accelerate launch / torchrun (DDP)
data.StepSchedule / pack_docs / sft_examples   deterministic step -> rows schedule, packed blocks, SFT examples
checkpoint.save / latest / fingerprint         atomic resumable checkpoints (model, optimizer, scheduler, RNG, step)
evaluate.heldout_nll                           held-out NLL / perplexity
probe.accuracy_probe                           greedy, pass@k, maj@k per mode (the evaluation code)
recipes.base / recipes.pretrain / sft.sft      the stages as functions: params -> Outcome(model, metrics, ...)
report.run_training_stage                      accelerator + MLflow run + recipe + outputs (models, metrics, plots)
"""
