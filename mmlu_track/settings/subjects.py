"""The 57 MMLU subjects, the original paper's 17 subcategories and 4 categories, and the answer letters
(A-D for MMLU's four choices, up to A-J for MMLU-Pro's ten options).

The mapping follows `categories.py` of the original repository (hendrycks/test), so category
scores here are comparable with the paper's.
"""

from __future__ import annotations

from types import MappingProxyType

LETTERS = tuple("ABCDEFGHIJ")  # the options' letters, in the order the data lists them (MMLU: A-D)


def letters(n: int) -> tuple[str, ...]:
    """The letters of a question with `n` options: A-D for MMLU's four, up to A-J."""
    if not 1 <= n <= len(LETTERS):
        raise ValueError(f"a question has 2 to {len(LETTERS)} options, not {n}")
    return LETTERS[:n]


# subject -> subcategory (each subject has exactly one in the original mapping)
_SUBCATEGORY: dict[str, str] = {
    "abstract_algebra": "math",
    "anatomy": "health",
    "astronomy": "physics",
    "business_ethics": "business",
    "clinical_knowledge": "health",
    "college_biology": "biology",
    "college_chemistry": "chemistry",
    "college_computer_science": "computer science",
    "college_mathematics": "math",
    "college_medicine": "health",
    "college_physics": "physics",
    "computer_security": "computer science",
    "conceptual_physics": "physics",
    "econometrics": "economics",
    "electrical_engineering": "engineering",
    "elementary_mathematics": "math",
    "formal_logic": "philosophy",
    "global_facts": "other",
    "high_school_biology": "biology",
    "high_school_chemistry": "chemistry",
    "high_school_computer_science": "computer science",
    "high_school_european_history": "history",
    "high_school_geography": "geography",
    "high_school_government_and_politics": "politics",
    "high_school_macroeconomics": "economics",
    "high_school_mathematics": "math",
    "high_school_microeconomics": "economics",
    "high_school_physics": "physics",
    "high_school_psychology": "psychology",
    "high_school_statistics": "math",
    "high_school_us_history": "history",
    "high_school_world_history": "history",
    "human_aging": "health",
    "human_sexuality": "culture",
    "international_law": "law",
    "jurisprudence": "law",
    "logical_fallacies": "philosophy",
    "machine_learning": "computer science",
    "management": "business",
    "marketing": "business",
    "medical_genetics": "health",
    "miscellaneous": "other",
    "moral_disputes": "philosophy",
    "moral_scenarios": "philosophy",
    "nutrition": "health",
    "philosophy": "philosophy",
    "prehistory": "history",
    "professional_accounting": "other",
    "professional_law": "law",
    "professional_medicine": "health",
    "professional_psychology": "psychology",
    "public_relations": "politics",
    "security_studies": "politics",
    "sociology": "culture",
    "us_foreign_policy": "politics",
    "virology": "health",
    "world_religions": "philosophy",
}

_CATEGORY_MEMBERS: dict[str, tuple[str, ...]] = {
    "STEM": ("physics", "chemistry", "biology", "computer science", "math", "engineering"),
    "humanities": ("history", "philosophy", "law"),
    "social sciences": ("politics", "culture", "economics", "geography", "psychology"),
    "other (business, health, misc.)": ("other", "business", "health"),
}

SUBJECTS: tuple[str, ...] = tuple(sorted(_SUBCATEGORY))
SUBCATEGORY: MappingProxyType[str, str] = MappingProxyType(_SUBCATEGORY)
CATEGORY_OF_SUBCATEGORY: MappingProxyType[str, str] = MappingProxyType(
    {sub: cat for cat, subs in _CATEGORY_MEMBERS.items() for sub in subs}
)
CATEGORIES: tuple[str, ...] = tuple(_CATEGORY_MEMBERS)


# MMLU-Pro's 14 categories (Wang et al. 2024), its subjects here: a category's shots are its own.
PRO_CATEGORIES: tuple[str, ...] = (
    "biology", "business", "chemistry", "computer science", "economics", "engineering", "health",
    "history", "law", "math", "other", "philosophy", "physics", "psychology",
)  # fmt: skip
# Each benchmark's subjects (`benchmark=`): what `subjects=all` means and what a name may be.
BENCHMARK_SUBJECTS: MappingProxyType[str, tuple[str, ...]] = MappingProxyType(
    {"mmlu": SUBJECTS, "mmlu_pro": PRO_CATEGORIES}
)


def category(subject: str) -> str:
    """The top-level category (one of `CATEGORIES`) of a subject."""
    return CATEGORY_OF_SUBCATEGORY[SUBCATEGORY[subject]]


def pretty(subject: str) -> str:
    """`high_school_biology` -> `high school biology` (the words used in prompt headers)."""
    return subject.replace("_", " ")
