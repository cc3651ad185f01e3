"""Named sizes for Mixtral. `tiny` is for tests; `mixtral-8x7b` is the published checkpoint's shape
(Jiang et al., 2024, "Mixtral of Experts": 8 experts, 2 per token, 32k context, RoPE base 1e6)."""

MIXTRAL_PRESETS = {
    "tiny": dict(vocab_size=1000, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=256,
                 bos_token_id=1, eos_token_id=2),
    "mixtral-8x7b": dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                         num_attention_heads=32, num_key_value_heads=8, num_local_experts=8, num_experts_per_tok=2,
                         max_position_embeddings=32768, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
                         rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
}
