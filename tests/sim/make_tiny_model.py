"""Build a tiny random-weight Llama with a locally trained tokenizer and a chat template.

The simulated cluster cannot reach a model hub, so its "model" is made here: a few MB, the
same file layout as a hub snapshot (config.json, safetensors, tokenizer files), seeded so the
same arguments always give the same bytes. It answers with nonsense, quickly, which is all a
deploy/acceptance test needs from it.

usage: python make_tiny_model.py OUTPUT_DIR
"""

import json
import os
import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIAL = ["<pad>", "<s>", "</s>", "<unk>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
WORDS = ("the model serves tokens across nodes while replicas answer requests through the load balancer and "
         "tensor parallel groups stay inside one island pipeline stages cross slower links cache memory budget "
         "weights overhead margin latency throughput prompt output concurrency").split()


def _corpus(lines=2000):
    # Deterministic pseudo-text: enough variety for a 512-token BPE vocabulary.
    for i in range(lines):
        yield " ".join(WORDS[(i * 7 + j * 13) % len(WORDS)] for j in range(12 + i % 9))


def build_tokenizer():
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=SPECIAL + ["<|user|>", "<|assistant|>", "<|system|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   unk_token="<unk>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_model(vocab_size):
    torch.manual_seed(1234)
    # head_dim 64: the CPU attention kernels support no smaller head.
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.generation_config.do_sample = False
    return model


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    tokenizer = build_tokenizer()
    tokenizer.save_pretrained(out_dir)
    build_model(len(tokenizer)).save_pretrained(out_dir, safe_serialization=True)
    # safetensors writes 0600; the service user must be able to read the snapshot.
    for name in os.listdir(out_dir):
        os.chmod(os.path.join(out_dir, name), 0o644)
    with open(os.path.join(out_dir, "config.json")) as handle:
        config = json.load(handle)
    print(json.dumps({"dir": out_dir, "vocab_size": config["vocab_size"], "layers": config["num_hidden_layers"],
                      "files": sorted(os.listdir(out_dir))}))


if __name__ == "__main__":
    main(sys.argv[1])
