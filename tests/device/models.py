"""Model directories for `vllm serve --load-format dummy` on the GPU device: real published shapes, no weights.

Each directory holds the model's config.json (the fields of the published config) and a word-level tokenizer
with exactly the model's vocabulary size, so every token id the random weights produce decodes. vLLM fills the
weights with random values of the real shapes, so memory, kernels and CUDA graphs are the real model's.

  python3 models.py OUT_DIR      writes OUT_DIR/<shape>/ for every shape and prints their names
"""

import json
import os
import sys

LLAMA31_ROPE = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192, "rope_type": "llama3"}
_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False, "mlp_bias": False,
          "hidden_act": "silu", "initializer_range": 0.02, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05,
          "rope_scaling": LLAMA31_ROPE, "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
          "use_cache": True, "vocab_size": 128256, "bos_token_id": 128000, "eos_token_id": 128009, "num_key_value_heads": 8}

SHAPES = {
    # meta-llama/Llama-3.1-8B-Instruct
    "llama-3.1-8b": dict(_LLAMA, hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_hidden_layers=32),
    # Qwen/Qwen2.5-32B-Instruct
    "qwen2.5-32b": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "attention_dropout": 0.0,
                    "hidden_act": "silu", "hidden_size": 5120, "initializer_range": 0.02, "intermediate_size": 27648,
                    "max_position_embeddings": 32768, "max_window_layers": 70, "num_attention_heads": 40,
                    "num_hidden_layers": 64, "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
                    "sliding_window": 131072, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True,
                    "use_sliding_window": False, "vocab_size": 152064, "bos_token_id": 151643, "eos_token_id": 151645},
    # meta-llama/Llama-3.1-70B-Instruct with FP8 weights as FP8 checkpoints of it carry them (lm_head left in BF16)
    "llama-3.1-70b-fp8": dict(_LLAMA, hidden_size=8192, intermediate_size=28672, num_attention_heads=64,
                              num_hidden_layers=80, quantization_config={"quant_method": "fp8",
                                                                         "activation_scheme": "dynamic",
                                                                         "ignored_layers": ["lm_head"]}),
}
# Special-token names as Llama 3.1 spells them. They must be longer than any "t<id>" plus the space decode puts
# between words: vLLM rejects a prompt of more than max_input_tokens * (longest vocab entry) characters.
BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"
CHAT_TEMPLATE = ("{% for message in messages %}{{ message['content'] }} {% endfor %}"
                 "{% if add_generation_prompt %}{{ '' }}{% endif %}")


def tokenizer_files(vocab_size, bos_id, eos_id):
    """tokenizer.json (WordLevel, whitespace-split) of exactly vocab_size tokens, with bos/eos at the config's ids."""
    vocab = dict(("t%d" % i, i) for i in range(vocab_size))
    specials = {bos_id: BOS, eos_id: EOS} if bos_id != eos_id else {eos_id: EOS}
    for token_id, token in specials.items():
        del vocab["t%d" % token_id]
        vocab[token] = token_id
    added = [{"id": token_id, "content": token, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for token_id, token in sorted(specials.items())]
    tokenizer = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
                 "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": None, "decoder": None,
                 "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "t0"}}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": specials.get(bos_id, EOS), "eos_token": EOS,
              "unk_token": "t0", "pad_token": EOS, "model_max_length": 131072, "chat_template": CHAT_TEMPLATE, "clean_up_tokenization_spaces": False}
    return {"tokenizer.json": tokenizer, "tokenizer_config.json": config}


def write(out_dir):
    for name, config in SHAPES.items():
        directory = os.path.join(out_dir, name)
        os.makedirs(directory, exist_ok=True)
        files = dict(tokenizer_files(config["vocab_size"], config["bos_token_id"], config["eos_token_id"]),
                     **{"config.json": config})
        for file_name, content in files.items():
            with open(os.path.join(directory, file_name), "w") as handle:
                json.dump(content, handle)
        os.chmod(directory, 0o755)
    return sorted(SHAPES)


if __name__ == "__main__":
    print(" ".join(write(sys.argv[1])))
