"""Client-side operations of each job: start, signal and query workflows, keep schedules, and the
operator's read models. The CLI, the worker's start-up, the demo, the benchmarks and the tests all
call these; nothing below (workflows, activities, pressroom) imports them."""
