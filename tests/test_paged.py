"""toykv.paged: a block pool serving many sequences gives each one exactly the logits of the
contiguous cache run alone; prefix caching, copy on write, finishing and failed steps."""
import numpy as np
import pytest
from conftest import make_model, token_ids
from test_cache_steps import Boom, fail_at

from toykv import KVCache
from toykv.paged import BlockManager, OutOfBlocks
from toykv.paged import decode_step_runner as paged_runner

EXACT_KINDS = ["mha", "gqa", "mqa", "mla_expanded", "mla_absorbed", "lowrank", "shared",
               "lowrank_shared", "mla_shared"]


def alone(model, prompt, n_new):
    """Greedy tokens and every step's logits with a contiguous cache."""
    cache = model.new_cache()
    logits = [model.forward(prompt, cache)[-1]]
    tokens = []
    for _ in range(n_new):
        tokens.append(int(np.argmax(logits[-1])))
        logits.append(model.forward([tokens[-1]], cache)[-1])
    return tokens, logits


@pytest.mark.parametrize("name", EXACT_KINDS)
@pytest.mark.parametrize("kv_dtype", ["float32", "int8"])
def test_interleaved_sequences_match_the_contiguous_cache_bit_for_bit(name, kv_dtype):
    model = make_model(name, exact=True)
    pool = model.new_paged_cache(num_blocks=12, block_size=4, kv_dtype=kv_dtype)
    prompts = [token_ids(n, seed=n) for n in (3, 9, 6)]
    # interleaved one decode step each, checked against a contiguous cache per sequence
    seqs = [pool.new_sequence() for _ in prompts]
    ref = []
    for p in prompts:
        c = model.new_cache(kv_dtype=kv_dtype)
        ref.append([c, model.forward(p, c)[-1]])
    last = [model.forward(p, s)[-1] for p, s in zip(prompts, seqs)]
    for i in range(3):
        assert np.array_equal(last[i], ref[i][1])
    for _ in range(7):
        for i, s in enumerate(seqs):
            t = [int(np.argmax(last[i]))]
            last[i] = model.forward(t, s)[-1]
            ref[i][1] = model.forward(t, ref[i][0])[-1]
            assert np.array_equal(last[i], ref[i][1])
            last_store = max(model.config.kv_sources)      # kv_sharing: a layer that stores
            assert np.array_equal(s.stored(last_store, s.names[0]),
                                  ref[i][0].stored(last_store, s.names[0]))
    assert seqs[1].nbytes == pool.manager.blocks_for(len(seqs[1])) * pool.block_nbytes


def test_nbytes_is_blocks_times_block_bytes():
    model = make_model("gqa")
    pool = model.new_paged_cache(8, 4)
    c = model.config
    assert pool.block_nbytes == 2 * c.n_layers * c.n_kv_heads * c.head_dim * 4 * 4
    seq = pool.new_sequence()
    model.forward(token_ids(5), seq)
    assert seq.nbytes == 2 * pool.block_nbytes and pool.used_nbytes == seq.nbytes
    assert sum(layer.nbytes(len(seq)) for layer in seq.layers) == seq.nbytes


@pytest.mark.parametrize("kv_dtype", ["float32", "int8"])
def test_layers_that_share_a_cache_hold_no_blocks_of_their_own(kv_dtype):
    model = make_model("lowrank_shared")                     # 3 layers, the first two share
    pool = model.new_paged_cache(8, 4, kv_dtype=kv_dtype)
    seq = pool.new_sequence()
    model.forward(token_ids(5), seq)
    per_layer = [layer.nbytes(len(seq)) for layer in seq.layers]
    r, b = model.config.kv_lora_rank, {"float32": 4, "int8": 1 + 4 / 12}[kv_dtype]
    assert per_layer[1] == 0 and per_layer[0] == per_layer[2] == 2 * 4 * r * b  # 2 blocks of 4
    assert sum(per_layer) == seq.nbytes


def test_prefix_caching_shares_full_blocks_and_changes_no_logit():
    model = make_model("gqa", exact=True)
    pool = model.new_paged_cache(16, 4)
    system = token_ids(10, seed=1)
    a, b = system + [1, 2, 3], system + [4, 5]
    first = pool.new_sequence(a)
    assert len(first) == 0
    model.forward(a, first)
    used = pool.manager.num_used
    second = pool.new_sequence(b)
    assert len(second) == 8 and second.cached_tokens == 8          # two full blocks of 4
    assert second.table[:2] == first.table[:2]
    assert [pool.manager.ref_count[x] for x in first.table[:2]] == [2, 2]
    assert pool.manager.num_used == used                            # nothing new yet
    logits = model.forward(b[len(second):], second)[-1]
    assert np.array_equal(logits, model.forward(b, model.new_cache())[-1])
    first.finish()
    second.finish()
    assert pool.manager.num_used == 0
    third = pool.new_sequence(system + [9])                         # freed, still cached
    assert len(third) == 8


def test_a_fork_copies_a_shared_block_on_write():
    model = make_model("mha", exact=True)
    pool = model.new_paged_cache(10, 4)
    seq = pool.new_sequence()
    model.forward(token_ids(6), seq)
    twin = seq.fork()
    assert twin.table == seq.table
    out_twin = model.forward([7], twin)[-1]
    assert twin.table[0] == seq.table[0] and twin.table[1] != seq.table[1]
    assert pool.manager.ref_count[seq.table[1]] == 1
    out_seq = model.forward([8], seq)[-1]
    ref = model.new_cache()
    model.forward(token_ids(6), ref)
    ref2 = ref.copy()
    assert np.array_equal(out_twin, model.forward([7], ref)[-1])
    assert np.array_equal(out_seq, model.forward([8], ref2)[-1])


@pytest.mark.parametrize("where", ["layer 0", "last layer"])
@pytest.mark.parametrize("shared", [False, True])
def test_a_failed_step_leaves_the_pool_exactly_as_it_was(where, shared, monkeypatch):
    model = make_model("gqa", exact=True)
    pool = model.new_paged_cache(10, 4)
    seq = pool.new_sequence()
    model.forward(token_ids(6), seq)
    if shared:
        seq.fork()
    before, table, length = pool.snapshot(), list(seq.table), len(seq)
    fail_at(model, where, monkeypatch)
    with pytest.raises(Boom):
        model.forward(token_ids(5, seed=3), seq)
    after = pool.snapshot()
    assert after[0] == before[0] and seq.table == table and len(seq) == length
    for x, y in zip(before[1], after[1]):
        assert all(np.array_equal(x[n], y[n]) for n in x)


def test_out_of_blocks_changes_nothing_and_says_why():
    model = make_model("mha")
    pool = model.new_paged_cache(3, 4)
    seq = pool.new_sequence()
    model.forward(token_ids(10), seq)
    before = pool.snapshot()
    with pytest.raises(OutOfBlocks, match="needs 1 free block, the pool has 0"):
        model.forward(token_ids(3), seq)
    assert pool.snapshot()[0] == before[0] and len(seq) == 10
    assert seq.blocks_needed(2) == 0 and seq.blocks_needed(3) == 1


def test_bad_input_is_refused_clearly():
    model = make_model("mha")
    with pytest.raises(ValueError, match="block_size must be"):
        model.new_paged_cache(4, 0)
    with pytest.raises(ValueError, match="num_blocks must be"):
        model.new_paged_cache(0, 4)
    with pytest.raises(ValueError, match="more than this machine"):
        model.new_paged_cache(10**12, 64)
    with pytest.raises(ValueError, match="sliding-window layers"):
        make_model("sliding").new_paged_cache(4, 4)
    pool, other = model.new_paged_cache(4, 4), model.new_paged_cache(4, 4)
    seq = pool.new_sequence()
    model.forward([1, 2], seq)
    with pytest.raises(ValueError, match="another BlockPool"):
        other.check_sequence(seq)
    with pytest.raises(ValueError, match="another ToyTransformer"):
        make_model("mha").forward([1], seq)
    seq.finish()
    with pytest.raises(ValueError, match="finished"):
        model.forward([3], seq)
    with pytest.raises(ValueError, match="already finished"):
        seq.finish()
    assert pool.manager.num_used == 0


def test_truncate_gives_blocks_back_and_copies_a_registered_block_before_writing():
    """A crop into a block another sequence found by its hash leaves that block as it is (its
    tokens stay findable); the next write copies it first."""
    model = make_model("mha", exact=True)
    pool = model.new_paged_cache(8, 4)
    ids = token_ids(10)
    seq = pool.new_sequence()
    model.forward(ids, seq)
    other = pool.new_sequence(ids[:9])                 # finds blocks 0 and 1: registered now
    assert other.table == seq.table[:2] and len(other) == 8
    assert seq.rollback_floor() == 0
    seq.truncate(6)                                    # into block 1, registered and shared
    assert len(seq) == 6 and len(seq.table) == 2 and pool.manager.num_used == 2
    assert seq.blocks_needed(1) == 1                   # a copy of block 1
    got = model.forward(ids[6:], seq)[-1]
    assert np.array_equal(got, model.forward(ids, model.new_cache())[-1])
    assert seq.table[1] != other.table[1]              # written into a copy
    assert np.array_equal(model.forward(ids[8:9], other)[-1],       # block 1 kept its tokens
                          model.forward(ids[:9], model.new_cache())[-1])
    seq2 = pool.new_sequence()
    model.forward(ids[:6], seq2)
    seq2.truncate(5)
    assert len(seq2) == 5
    with pytest.raises(ValueError, match="n must be"):
        seq2.truncate(7)


def test_a_blocks_hash_is_registered_only_once_its_tokens_are_kept():
    """vLLM's rule: the block a step completes is hashed when the sequence goes on (or forks,
    finishes, or the pool looks up a prefix), so tokens rolled back right after their step
    never reach the table, and the block is written again in place."""
    model = make_model("gqa", exact=True)
    pool = model.new_paged_cache(8, 4)
    ids = token_ids(10)
    seq = pool.new_sequence()
    model.forward(ids[:6], seq)                        # block 0 full
    assert pool.manager.prefix_blocks == {}            # not kept for sure yet
    model.forward(ids[6:10], seq)                      # completes block 1 (tokens 4..7)
    assert len(pool.manager.prefix_blocks) == 1        # block 0 was kept: registered
    seq.truncate(7)                                    # reject the step's last three
    assert seq.blocks_needed(1) == 0                   # block 1 is written in place
    model.forward([5], seq)
    assert len(pool.manager.prefix_blocks) == 1        # block 1 held rejected tokens: not
    model.forward([6], seq)                            # the step after: block 1 kept
    assert pool.manager.cached_blocks(ids[:7] + [5, 9]) == seq.table[:2]
    assert pool.manager.cached_blocks(ids[:9]) == seq.table[:1]    # the rejected: not found


def test_a_prompt_ending_on_a_cached_block_keeps_both_copies():
    """The prompt's last full block is computed again (its logits are needed): two blocks hold
    the same tokens; both stay registered, so freeing and reusing one keeps the prefix."""
    model = make_model("gqa", exact=True)
    pool = model.new_paged_cache(6, 4)
    prompt = token_ids(8)                              # two full blocks
    first = pool.new_sequence(prompt)
    model.forward(prompt, first)
    second = pool.new_sequence(prompt)                 # finds block 0 only: 1 token is left
    assert len(second) == 4
    model.forward(prompt[4:], second)                  # block 1 again, in a new block
    first.finish()
    second.finish()
    second_copy = 2                                    # second's block 1, after 0 and 1
    key = pool.manager.hash_of[1]
    assert key is not None and len(pool.manager.prefix_blocks[key]) == 2
    assert pool.manager.cached_blocks(prompt + [1]) == [0, 1]       # the oldest copy first
    while pool.manager.take() != 1:                    # take free blocks until 1 is reused
        pass
    assert pool.manager.hash_of[1] is None
    found = pool.manager.cached_blocks(prompt + [1])
    assert found == [0, second_copy]                   # the twin still serves the prefix


def test_the_manager_alone_counts_blocks():
    m = BlockManager(4, 16)
    assert m.blocks_for(0) == 0 and m.blocks_for(16) == 1 and m.blocks_for(17) == 2
    b = m.take()
    m.share(b)
    m.release(b)
    m.release(b)
    assert m.num_free == 4
    with pytest.raises(ValueError, match="not in use"):
        m.release(b)
    seq = make_model().new_paged_cache(2, 2).new_sequence()
    assert isinstance(seq, KVCache) and seq.table == []


def test_the_decode_step_runner_steps_every_sequence_once():
    model = make_model("gqa")
    step = paged_runner(model, 10, block_size=4, sequences=3, calls=2)
    step()
    assert [table.length for table in step.pool.sequences] == [10, 10, 10]
    step()                                     # room for `calls` calls, at least
    with pytest.raises(OutOfBlocks):
        for _ in range(4):
            step()


def test_reads_of_a_middle_range_gather_the_right_positions():
    model = make_model("mla_absorbed", exact=True)
    pool = model.new_paged_cache(10, 4, kv_dtype="int8")
    seq, ref = pool.new_sequence(), model.new_cache(kv_dtype="int8")
    ids = token_ids(11)
    model.forward(ids, seq)
    model.forward(ids, ref)
    for name in seq.names:
        for first, end in [(0, 11), (3, 9), (4, 8), (5, 6)]:
            assert np.array_equal(seq.layers[1].read(name, first, end),
                                  ref.layers[1].read(name, first, end))


@pytest.mark.parametrize("blocks, view", [([2, 3, 4], True), ([5], True), ([4, 2, 7], False),
                                          ([1, 2, 4], False), ([], False)])
def test_blocks_in_a_row_are_read_in_place_and_others_copied_in_order(blocks, view):
    """take_blocks gives the blocks array[:, blocks] gives, in order: a view of the pool when
    they sit side by side, else one C-ordered copy (what the reshape after it needs)."""
    from toykv.kinds.paged import take_blocks
    pool = np.arange(3 * 8 * 4 * 2, dtype=np.float32).reshape(3, 8, 4, 2)   # [H, blocks, bs, d]
    index = np.array(blocks, dtype=np.int64)
    got = take_blocks(pool, index, axis=1)
    assert np.array_equal(got, pool[:, index])
    assert np.shares_memory(got, pool) == view
    assert got.flags.c_contiguous or view
    flat = take_blocks(pool[0], index, axis=0)                    # the scales' layout
    assert np.array_equal(flat, pool[0][index])
