"""How often the exports of a translation run give attnkit's tokens: transformers' `generate` on the
`export hf` folder, `ctranslate2.Translator` on `export ctranslate2` (float32 and int8) and, for a run whose
decoder starts from zero (the presets'), on what CTranslate2's own converter makes of the `export hf` folder;
greedy and beam 4, on English number words, each sentence with attnkit's length limit (its source + 50) and no
minimum length (CTranslate2's default is 1). Outputs are compared as tokens (the hf folder's ids are Marian's
order). Prints a table; usage: python benchmarks/export_agreement.py RUN [--every 8]."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import ctranslate2
import torch
import transformers
from num2words import num2words

from attnkit.app.export.ctranslate2_export import export_ctranslate2
from attnkit.app.interop.hf_export import export_hf
from attnkit.translation.decoding import EXTRA_LENGTH, DecodingConfig, beam_search, greedy_decode
from attnkit.translation.tokenizer import EOS_ID
from attnkit.translation.translator import Translator


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run", type=Path)
    parser.add_argument("--every", type=int, default=8, help="every Nth number of 1..999")
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp())
    export_hf(args.run, out / "hf")
    export_ctranslate2(args.run, out / "ct2")
    export_ctranslate2(args.run, out / "ct2-int8", quantization="int8")
    model = Translator.from_run(args.run, device="cpu").model
    folders = ["ct2", "ct2-int8"]
    if model.config.decoder_start == "zero":
        ctranslate2.converters.TransformersConverter(str(out / "hf")).convert(str(out / "converted"))
        folders.append("converted")
    tokenizer = transformers.AutoTokenizer.from_pretrained(out / "ct2")  # attnkit's ids
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(out / "hf")  # Marian's order of them
    marian = transformers.MarianMTModel.from_pretrained(out / "hf").eval()
    texts = [num2words(n) for n in range(1, 1000, args.every)]
    ids = [tokenizer(text).input_ids for text in texts]
    power = DecodingConfig(length_penalty_form="power")
    ours = {"greedy": [greedy_decode(model, torch.tensor([i]))[0] for i in ids],
            "beam 4, GNMT penalty": [beam_search(model, torch.tensor([i]), 4, 0.6)[0].tokens for i in ids],
            "beam 4, power penalty": [beam_search(model, torch.tensor([i]), 4, 0.6, rules=power)[0].tokens
                                      for i in ids]}
    theirs = {}
    with torch.no_grad():
        for beams in (1, 4):
            generated = [marian.generate(torch.tensor([hf_tokenizer(text).input_ids]), num_beams=beams,
                                         max_new_tokens=len(i) + EXTRA_LENGTH - 1)[0, 1:]
                         for text, i in zip(texts, ids)]  # Marian's ids -> tokens -> attnkit's ids
            tokens = [hf_tokenizer.convert_ids_to_tokens(row.tolist()) for row in generated]
            theirs[("transformers generate", beams)] = [_until_eos(tokenizer.convert_tokens_to_ids(t)) for t in tokens]
    for folder in folders:
        translator = ctranslate2.Translator(str(out / folder))
        for beams in (1, 4):
            results = [translator.translate_batch([tokenizer.convert_ids_to_tokens(i)], beam_size=beams,
                                                  length_penalty=0.6, min_decoding_length=0,
                                                  max_decoding_length=len(i) + EXTRA_LENGTH - 1)[0] for i in ids]
            theirs[(f"CTranslate2 {folder}", beams)] = [tokenizer.convert_tokens_to_ids(r.hypotheses[0])
                                                        for r in results]
    print("| engine | search | attnkit's search | identical |\n|---|---|---|---|")
    for (engine, beams), outputs in theirs.items():
        for name in (["greedy"] if beams == 1 else ["beam 4, GNMT penalty", "beam 4, power penalty"]):
            same = sum(a == b for a, b in zip(outputs, ours[name]))
            print(f"| {engine} | {'greedy' if beams == 1 else 'beam 4'} | {name} | {same}/{len(ids)} |")


def _until_eos(row: list[int]) -> list[int]:
    return row[:row.index(EOS_ID)] if EOS_ID in row else row


if __name__ == "__main__":
    main()
