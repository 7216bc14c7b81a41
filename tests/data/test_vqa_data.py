"""VQA data: questions read from a split file's "qa", the answer vocabulary and the soft
scores on hand-made examples."""

import pytest

from catcap.data.karpathy import parse_karpathy
from catcap.data.vqa import AnswerVocab, VQAFormatError, answer_score, load_questions, soft_scores


def _records(qa):
    data = {"images": [{"filename": "1.png", "split": "train", "imgid": 7, "sentences": [{"raw": "a red circle"}],
                        "qa": qa}]}
    return parse_karpathy(data)["train"]


def test_soft_scores_by_hand():
    """Ten answers: 'two' x4 -> 1, 'three' x2 -> 2/3, 'four' x1 -> 1/3, 'many' x3 -> 1 (not in the
    vocabulary: no entry). One answer: 1 for it, 0 for anything else."""
    answers = ["two"] * 4 + ["three"] * 2 + ["four"] + ["many"] * 3
    vocab = AnswerVocab(["yes", "two", "three", "four"])
    assert soft_scores(answers, vocab) == {1: 1.0, 2: pytest.approx(2 / 3), 3: pytest.approx(1 / 3)}
    assert answer_score("three", answers) == pytest.approx(2 / 3) and answer_score("no", answers) == 0.0
    assert soft_scores(["yes"], vocab) == {0: 1.0}
    assert answer_score("yes", ["yes"]) == 1.0 and answer_score("no", ["yes"]) == 0.0


def test_questions_and_answer_vocabulary_from_a_split_file():
    qas = [{"question": "What color is the circle?", "answer": "Red", "type": "color"},
           {"question": "how many circles are there?", "answers": ["one", "one", "two"], "type": "count"},
           {"question": "is there a square?", "answer": "no"}]
    questions = load_questions(_records(qas))
    assert [q.tokens for q in questions] == [["what", "color", "is", "the", "circle"],
                                            ["how", "many", "circles", "are", "there"], ["is", "there", "a", "square"]]
    assert [q.answers for q in questions] == [["red"], ["one", "one", "two"], ["no"]]
    assert [q.type for q in questions] == ["color", "count", "other"] and {q.key for q in questions} == {"7"}
    vocab = AnswerVocab.build(questions)
    assert vocab.answers == ["no", "one", "red", "two"]  # each seen once: alphabetical
    assert AnswerVocab.from_json(vocab.to_json()).answers == vocab.answers
    assert AnswerVocab.build(questions * 2, min_count=2).answers == vocab.answers
    with pytest.raises(VQAFormatError, match="no answer is given for at least 3 training questions"):
        AnswerVocab.build(questions, min_count=3)


@pytest.mark.parametrize("qa, message", [
    ({"answer": "yes"}, "qa\\[0\\]: expected an object with a non-empty \"question\" string"),
    ({"question": "is it?", "answers": []}, "expected \"answer\": a non-empty string or \"answers\""),
    ({"question": "is it?", "answer": 3}, "found 3"),
])
def test_bad_qa_entries_are_refused_with_where_they_are(qa, message):
    with pytest.raises(VQAFormatError, match="image 7, " + message if "qa\\[" in message else message):
        load_questions(_records([qa]))
