"""reasoning-gym's scorers are methods of its datasets: the one step, as its README documents it.

``get_score_answer_fn(name)`` builds the dataset at its default configuration and returns its
bound ``score_answer(answer, entry)``; the check calls that with ``response=answer`` and an
``example=`` whose ``entry`` is the dataset's first item (``examples/reasoning_gym_*.json``).
"""

from reasoning_gym import get_score_answer_fn

basic_arithmetic = get_score_answer_fn("basic_arithmetic")
chain_sum = get_score_answer_fn("chain_sum")
decimal_arithmetic = get_score_answer_fn("decimal_arithmetic")
fraction_simplification = get_score_answer_fn("fraction_simplification")
complex_arithmetic = get_score_answer_fn("complex_arithmetic")
polynomial_equations = get_score_answer_fn("polynomial_equations")
polynomial_multiplication = get_score_answer_fn("polynomial_multiplication")
simple_integration = get_score_answer_fn("simple_integration")
intermediate_integration = get_score_answer_fn("intermediate_integration")
prime_factorization = get_score_answer_fn("prime_factorization")
time_intervals = get_score_answer_fn("time_intervals")
countdown = get_score_answer_fn("countdown")
puzzle24 = get_score_answer_fn("puzzle24")
propositional_logic = get_score_answer_fn("propositional_logic")
number_sorting = get_score_answer_fn("number_sorting")
word_sorting = get_score_answer_fn("word_sorting")
advanced_geometry = get_score_answer_fn("advanced_geometry")
gsm_symbolic = get_score_answer_fn("gsm_symbolic")
