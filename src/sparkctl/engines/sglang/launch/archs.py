"""Architecture lists copied from SGLang 0.5.23 (data only; docs/launch-safety.md cites the lines)."""

from __future__ import annotations

# srt/configs/model_config.py:2391 multimodal_model_archs (MIMO_V2_MULTIMODAL_ARCHS left out: their
# multimodality depends on vision_config + audio_config being present, model_config.py:705).
MULTIMODAL_ARCHS: frozenset[str] = frozenset(
    [
        "CLIPModel",
        "Cohere2VisionForConditionalGeneration",
        "Cosmos3EdgeForConditionalGeneration",
        "DeepseekVL2ForCausalLM",
        "Ernie4_5_VLMoeForConditionalGeneration",
        "MiniMaxM3SparseForConditionalGeneration",
        "Gemma3ForConditionalGeneration",
        "Gemma3nForConditionalGeneration",
        "Gemma4ForConditionalGeneration",
        "EmbeddingGemma2Model",
        "Gemma4UnifiedForConditionalGeneration",
        "DiffusionGemmaForBlockDiffusion",
        "Glm4vForConditionalGeneration",
        "Glm4vMoeForConditionalGeneration",
        "Glm5NextForConditionalGeneration",
        "GlmOcrForConditionalGeneration",
        "GlmAsrForConditionalGeneration",
        "GlmImageForConditionalGeneration",
        "Grok1VForCausalLM",
        "Grok1AForCausalLM",
        "LlavaLlamaForCausalLM",
        "Llama4ForConditionalGeneration",
        "LlavaMistralForCausalLM",
        "LlavaQwenForCausalLM",
        "LlavaForConditionalGeneration",
        "LlavaVidForCausalLM",
        "Lfm2VlForConditionalGeneration",
        "LightOnOCRForConditionalGeneration",
        "MiMoV2ASRForCausalLM",
        "MiniCPMO",
        "MiniCPMV",
        "Mistral3ForConditionalGeneration",
        "MultiModalityCausalLM",
        "MllamaForConditionalGeneration",
        "MossVLForConditionalGeneration",
        "NemotronH_Nano_VL_V2",
        "NemotronH_Nano_Omni_Reasoning_V3",
        "NemotronH_Omni_Reasoning_V3",
        "MuseGlimmerForConditionalGeneration",
        "MuseSparkForConditionalGeneration",
        "PixtralForConditionalGeneration",
        "Qwen2AudioForConditionalGeneration",
        "Qwen2VLForConditionalGeneration",
        "Qwen2_5_VLForConditionalGeneration",
        "Qwen3VLForConditionalGeneration",
        "Qwen3VLMoeForConditionalGeneration",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "Qwen4ExpForConditionalGeneration",
        "InternS2PreviewForConditionalGeneration",
        "InternS2MobiusForConditionalGeneration",
        "Qwen3ASRForConditionalGeneration",
        "Qwen3OmniMoeForConditionalGeneration",
        "KimiVLForConditionalGeneration",
        "LocateAnythingForConditionalGeneration",
        "InternVLChatModel",
        "InternS1ForConditionalGeneration",
        "InternS1ProForConditionalGeneration",
        "Phi4MMForCausalLM",
        "VoxtralForConditionalGeneration",
        "WhisperForConditionalGeneration",
        "Step3VLForConditionalGeneration",
        "POINTSV15ChatModel",
        "DotsVLMForCausalLM",
        "Dots3NoteForCausalLM",
        "DotsOCRForCausalLM",
        "Sarashina2VisionForCausalLM",
        "NVILAForConditionalGeneration",
        "NVILALiteForConditionalGeneration",
        "DeepseekOCRForCausalLM",
        "UnlimitedOCRForCausalLM",
        "JetVLMForConditionalGeneration",
        "PaddleOCRVLForConditionalGeneration",
        "MiDashengLMModel",
        "StepVLForConditionalGeneration",
        "Step3p7ForConditionalGeneration",
        "KimiK25ForConditionalGeneration",
        "BailingMMNativeForConditionalGeneration",
        "BailingMM2NativeForConditionalGeneration",
        "BailingMoeV3VLForConditionalGeneration",
    ]
)

# srt/configs/model_config.py:692 mm_disabled_models: multimodal off unless --enable-multimodal.
MM_DISABLED_BY_DEFAULT: frozenset[str] = frozenset(
    {
        "Gemma3ForConditionalGeneration",
        "Llama4ForConditionalGeneration",
        "Step3VLForConditionalGeneration",
        "InklingForConditionalGeneration",
    }
)

# Architectures whose HF config class builds a default vision_config when config.json has none
# (srt/configs/qwen3_5.py:97, qwen3_vl.py:8: depth 27, hidden_size 1152, no num_hidden_layers).
DEFAULT_VISION_CONFIG: dict[str, dict[str, int]] = {
    a: {"hidden_size": 1152}
    for a in (
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "Qwen3VLForConditionalGeneration",
        "Qwen3VLMoeForConditionalGeneration",
    )
}
