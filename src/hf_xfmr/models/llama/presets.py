"""Named sizes for the Llama family. `tiny` is for tests; the others are published checkpoints' shapes:
Llama 2 7B (Touvron et al., 2023), Llama 3.2 1B (Meta, 2024; llama3 RoPE scaling, tied embeddings),
Mistral 7B v0.1 (Jiang et al., 2023; sliding window 4096), Qwen2 0.5B (Yang et al., 2024; q/k/v biases)."""

_LLAMA2 = dict(vocab_size=32000, bos_token_id=1, eos_token_id=2, rms_norm_eps=1e-5)

LLAMA_PRESETS = {
    "tiny": dict(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=256, bos_token_id=1, eos_token_id=2),
    "llama-2-7b": dict(**_LLAMA2, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096),
    "llama-3.2-1b": dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=64, max_position_embeddings=131072,
                         rms_norm_eps=1e-5, bos_token_id=128000, eos_token_id=128001, tie_word_embeddings=True,
                         rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=32.0, low_freq_factor=1.0,
                                              high_freq_factor=4.0, original_max_position_embeddings=8192)),
    "mistral-7b": dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=32768, rms_norm_eps=1e-5,
                       bos_token_id=1, eos_token_id=2, sliding_window=4096, hf_model_type="mistral"),
    "qwen2-0.5b": dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                       num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
                       bos_token_id=151643, eos_token_id=151643, tie_word_embeddings=True, hf_model_type="qwen2",
                       rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
}
