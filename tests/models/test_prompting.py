"""One question, one prompt: the token ids the trainer's rollout, the trainer's evaluation and
`ascent serve` feed the policy are the same, with SmolLM2's real BPE tokenizer and chat
template (which adds a default system message), and no special token is ever doubled."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import openai
import pytest
import torch
from tokenizers import processors
from transformers import LlamaConfig, LlamaForCausalLM

from ascent.data import DrawnPrompt, Problem, PromptFormatter, uses_chat_template
from ascent.rules import LLMConfig
from ascent.serve.local_policy import LocalPolicy
from ascent.serve.server import PolicyServer
from ascent.train.distributed import Dist
from ascent.train.evaluate import evaluate
from ascent.train.llm_rollout import Rollouts

QUESTION = "What is 17 + 25?"
# SmolLM2-135M-Instruct's template, written out by hand for one user message.
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
EXPECTED_TEXT = (
    f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
    f"<|im_start|>user\n{QUESTION}<|im_end|>\n"
    "<|im_start|>assistant\n"
)


class RecordingEngine:
    """A rollout engine that records the prompt ids it is given and ends every row at once."""

    def __init__(self, eos: int) -> None:
        self.eos = eos
        self.prompts: list[list[int]] = []

    def generate(self, prompts, group_ids, n, params, generator=None):
        self.prompts += [list(p) for p in prompts]
        rows = len(prompts) * n
        return SimpleNamespace(
            response_ids=torch.full((rows, 1), self.eos),
            group_ids=torch.as_tensor(group_ids).repeat_interleave(n),
        )


def no_reward(prompts, completions, **columns):
    return SimpleNamespace(details=[{}] * len(completions), total=[0.0] * len(completions))


def trainer_ids(tokenizer, question: str = QUESTION) -> tuple[list[int], list[int]]:
    """(rollout ids, evaluation ids) of one problem, through the trainer's own code: the
    formatter `build_run` makes from [data], `Rollouts.collect`, `evaluate.evaluate`."""
    data = LLMConfig().data  # prompt_template "{prompt}", chat_template "auto"
    chat = uses_chat_template(data.chat_template, tokenizer)
    formatter = PromptFormatter(data.prompt_template, tokenizer, chat)
    problem = Problem(key="q", prompt=question, answer="42")
    engine = RecordingEngine(tokenizer.eos_token_id)
    rollouts = Rollouts(
        dist=Dist.single(torch.device("cpu")),
        sampler=None,
        formatter=formatter,
        engine=engine,
        tokenizer=tokenizer,
        reward=None,
        sampling=None,
        generator=None,
        group_size=4,
        prompts_per_step=1,
    )
    rollouts.collect([DrawnPrompt(uid=7, problem=problem)])
    evaluate(engine, tokenizer, no_reward, [problem], max_new_tokens=4, formatter=formatter)
    (rollout, evaluation) = engine.prompts
    return rollout, evaluation


def served_ids(tokenizer, question: str = QUESTION) -> tuple[list[int], int]:
    """The ids `ascent serve` feeds the model for one user message over HTTP
    (/v1/chat/completions, the openai client), and the prompt_tokens it reports."""
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    policy = LocalPolicy(LlamaForCausalLM(config), tokenizer, "smollm2", "test")
    seen: list[list[int]] = []

    def engine(ids, params):
        seen.extend(list(row) for row in ids)
        return [([], True) for _ in ids]

    policy._engine = engine
    with PolicyServer(policy, port=0, window_sec=0.0) as server:
        client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)
        reply = client.chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": question}], max_tokens=4
        )
    (ids,) = seen
    return ids, reply.usage.prompt_tokens


def test_rollout_evaluation_and_serve_feed_smollm2_the_same_ids(smollm2_tokenizer):
    tok = smollm2_tokenizer
    rollout, evaluation = trainer_ids(tok)
    served, reported = served_ids(tok)
    assert rollout == evaluation == served
    assert reported == len(served)
    # The exact prompt, as SmolLM2's template writes it, with nothing added around it.
    assert tok.decode(served) == EXPECTED_TEXT
    # transformers' own chat encoding (an independent path) agrees to the token.
    reference = tok.apply_chat_template(
        [{"role": "user", "content": QUESTION}], tokenize=True, add_generation_prompt=True
    )
    assert served == list(reference["input_ids"])


def test_the_default_system_message_and_each_turn_opening_appear_once(smollm2_tokenizer):
    tok = smollm2_tokenizer
    ids, _ = served_ids(tok)
    start, end = tok.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"])
    # system, user, and the assistant turn's opening: one <|im_start|> each, none doubled
    assert ids.count(start) == 3 and ids[0] == start and ids[1] != start
    assert ids.count(end) == 2  # the system and user turns are closed; the assistant's is open
    system_ids = tok(SYSTEM, add_special_tokens=False)["input_ids"]
    windows = [ids[i : i + len(system_ids)] for i in range(len(ids) - len(system_ids) + 1)]
    assert windows.count(system_ids) == 1


@pytest.fixture
def bos_adding_tokenizer(smollm2_tokenizer):
    """SmolLM2's tokenizer, made to add `<|im_start|>` in front of every text it encodes with
    special tokens, as Llama-3's adds `<|begin_of_text|>` that its chat template also writes."""
    tok = copy.deepcopy(smollm2_tokenizer)
    tok._tokenizer.post_processor = processors.TemplateProcessing(
        single="<|im_start|> $A",
        pair="<|im_start|> $A <|im_start|> $B",
        special_tokens=[("<|im_start|>", tok.bos_token_id)],
    )
    assert tok("hi")["input_ids"] == [
        tok.bos_token_id,
        *tok("hi", add_special_tokens=False)["input_ids"],
    ]
    return tok


def test_a_tokenizer_that_adds_a_bos_does_not_double_the_templates_own(bos_adding_tokenizer):
    tok = bos_adding_tokenizer
    rollout, evaluation = trainer_ids(tok)
    served, _ = served_ids(tok)
    assert rollout == evaluation == served
    assert tok.decode(served) == EXPECTED_TEXT
    assert served[:2] != [tok.bos_token_id] * 2


def test_plain_prompts_get_the_tokenizers_bos_once(bos_adding_tokenizer):
    """Without a chat template ([data] chat_template off; /v1/completions) the tokenizer's own
    BOS is added, and a prompt that already starts with it gets no second one."""
    tok = bos_adding_tokenizer
    formatter = PromptFormatter("{prompt}", tok, chat=False)
    (ids,) = formatter.encode([Problem(key="q", prompt=QUESTION, answer="42")])
    assert ids == [tok.bos_token_id, *tok(QUESTION, add_special_tokens=False)["input_ids"]]
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    policy = LocalPolicy(LlamaForCausalLM(config), tok, "m", "test")
    assert policy.encode(QUESTION) == ids
    assert policy.encode(tok.bos_token + QUESTION) == ids
