"""The model, its fused LM head, the tokenizer and the prompt format."""
