"""`--arch gpt2_transformer_lm`: fairseq's own transformer_lm (a GPT-2 imported by
fairseq-alibi-import-hf is one: learned positions, pre-norm, tied or untied output) whose output never
predicts --masked-output-symbols (masked_output.py): the fairseq symbols the GPT-2 lacks. Its weights
and options are transformer_lm's (and, as the plugin's models, the dictionary it was trained on: refused
other data); the import writes it only where there is something to mask."""
import dataclasses

from fairseq.models import register_model
from fairseq.models.transformer_lm import TransformerLanguageModel, TransformerLanguageModelConfig

from fairseq_alibi.models.decoder import RECORDED_DICTIONARY_FIELD, check_recorded_dictionary
from fairseq_alibi.models.masked_output import MASKED_OUTPUT_FIELD, mask_output

Gpt2LanguageModelConfig = dataclasses.make_dataclass(
    "Gpt2LanguageModelConfig", [MASKED_OUTPUT_FIELD, RECORDED_DICTIONARY_FIELD], bases=(TransformerLanguageModelConfig,))


@register_model("gpt2_transformer_lm", dataclass=Gpt2LanguageModelConfig)
class Gpt2LanguageModel(TransformerLanguageModel):
    @classmethod
    def build_model(cls, args, task):
        check_recorded_dictionary(args, task.source_dictionary)
        model = super().build_model(args, task)
        mask_output(model.decoder, getattr(args, "masked_output_symbols", None))
        return model
