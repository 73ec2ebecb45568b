"""Hugging Face ``Trainer`` on a tiny random-init BertForSequenceClassification (2 layers, from a config:
nothing downloaded) over a synthetic torch Dataset, for the advisor's third-party scenarios, with one
injected cause: a slow ``__getitem__`` or host work in a ``TrainerCallback.on_step_end``."""
import os
import tempfile
import time

import torch
from stack_common import Samples, arguments
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback, TrainingArguments

parser = arguments(__doc__, 30)
parser.add_argument("--callback-ms", type=float, default=0.0, help="host work in on_step_end, per step")
args = parser.parse_args()
BATCH, LENGTH, VOCAB = 32, 32, 128  # at batch 8 the Trainer's own ~5.5 ms a step was 29-30 % of it here: at the advisor's high-severity line


def samples():
    generator = torch.Generator().manual_seed(0)
    return Samples({"input_ids": torch.randint(0, VOCAB, (args.steps * BATCH, LENGTH), generator=generator),
                    "labels": torch.randint(0, 2, (args.steps * BATCH,), generator=generator)}, args.sample_ms)


class HostWork(TrainerCallback):
    def on_step_end(self, arguments, state, control, **kwargs):
        time.sleep(args.callback_ms / 1000)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = BertConfig(vocab_size=VOCAB, hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=256,
                        max_position_embeddings=LENGTH, num_labels=2)
    model = BertForSequenceClassification(config)
    with tempfile.TemporaryDirectory() as out:
        training = TrainingArguments(output_dir=os.path.join(out, "trainer"), use_cpu=True, report_to=[], max_steps=args.steps,
                                     per_device_train_batch_size=BATCH, dataloader_num_workers=args.workers, logging_strategy="no",
                                     save_strategy="no", disable_tqdm=True, learning_rate=1e-4, seed=0)
        trainer = Trainer(model=model, args=training, train_dataset=samples(), callbacks=[HostWork()] if args.callback_ms else [])
        result = trainer.train()
    print(f"trained {result.global_step} steps", flush=True)


if __name__ == "__main__":
    main()
