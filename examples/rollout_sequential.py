"""run.rollouts -- a policy-gradient loop whose rollouts, one environment step at a time, hold the run.

In the style of a PPO library's classic-control training: an actor-critic MLP collects ``rollout``
transitions from a cart-pole environment (its dynamics in plain Python, as classic-control tasks are
written), one environment step and one policy forward (``torch.no_grad()``, ``eval()``) at a time,
then trains on them for ``epochs`` passes of minibatches. The optimizer steps are short and right;
what holds most of each iteration is the collection between updates: thousands of batch-1 forwards,
each paying the fixed cost of its ops, with the environment's Python in between.

Planted: one environment, ``rollout`` sequential steps per iteration.

Fix (``--fix``): ``envs`` environments stepped together (``rollout / envs`` steps each, the same
transitions per update): one forward serves ``envs`` environments, as vectorised environments do.

A step here is what the fix is judged on: one iteration (rollout + update); ``mean_iteration_ms`` is
its mean over the iterations after the first (``collect_share``: the rollouts' part of the run).
"""
import argparse
import math
import random
import statistics
import time

import torch
from torch import nn

PLANTED = ["run.rollouts"]
E2E_STEPS = 6
"""Iterations in the end-to-end tests (each holds 2,048 environment steps and 64 optimizer steps)."""


class CartPole:
    """The classic cart-pole balance task (Barto, Sutton & Anderson 1983), Euler-integrated."""

    def __init__(self, rng):
        self.rng = rng
        self.reset()

    def reset(self):
        self.state = [self.rng.uniform(-0.05, 0.05) for _ in range(4)]
        return list(self.state)

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state
        force = 10.0 if action == 1 else -10.0
        cos, sin = math.cos(theta), math.sin(theta)
        temp = (force + 0.05 * theta_dot**2 * sin) / 1.1
        theta_acc = (9.8 * sin - cos * temp) / (0.5 * (4.0 / 3.0 - 0.1 * cos**2 / 1.1))
        x_acc = temp - 0.05 * theta_acc * cos / 1.1
        x, x_dot = x + 0.02 * x_dot, x_dot + 0.02 * x_acc
        theta, theta_dot = theta + 0.02 * theta_dot, theta_dot + 0.02 * theta_acc
        self.state = [x, x_dot, theta, theta_dot]
        done = abs(x) > 2.4 or abs(theta) > 12 * 2 * math.pi / 360
        if done:
            self.reset()
        return list(self.state), 1.0, done


class ActorCritic(nn.Module):
    def __init__(self, hidden=64):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.pi, self.v = nn.Linear(hidden, 2), nn.Linear(hidden, 1)

    def forward(self, obs):
        h = self.body(obs)
        return self.pi(h), self.v(h).squeeze(-1)


def collect(model, envs, obs, steps):
    """`steps` transitions from each env, one batched forward per step (1 env: batch 1)."""
    model.eval()
    out = {k: [] for k in ("obs", "act", "logp", "val", "rew", "done")}
    with torch.no_grad():
        for _ in range(steps):
            o = torch.tensor(obs, dtype=torch.float32)
            logits, value = model(o)
            dist = torch.distributions.Categorical(logits=logits)
            act = dist.sample()
            results = [env.step(a) for env, a in zip(envs, act.tolist())]
            out["obs"].append(o)
            out["act"].append(act)
            out["logp"].append(dist.log_prob(act))
            out["val"].append(value)
            out["rew"].append(torch.tensor([r for _, r, _ in results]))
            out["done"].append(torch.tensor([float(d) for _, _, d in results]))
            obs = [s for s, _, _ in results]
    return {k: torch.stack(v) for k, v in out.items()}, obs


def advantages(batch, gamma=0.99, lam=0.95):
    """Generalised advantage estimation over the (steps, envs) rollout, backwards in time."""
    rew, val, done = batch["rew"], batch["val"], batch["done"]
    adv, last = torch.zeros_like(rew), torch.zeros(rew.shape[1])
    for t in reversed(range(rew.shape[0])):
        nxt = val[t + 1] if t + 1 < rew.shape[0] else torch.zeros(rew.shape[1])
        delta = rew[t] + gamma * nxt * (1 - done[t]) - val[t]
        last = delta + gamma * lam * (1 - done[t]) * last
        adv[t] = last
    return adv, adv + val


def update(model, opt, batch, epochs, minibatch):
    model.train()
    adv, ret = advantages(batch)
    flat = {k: v.reshape(-1, *v.shape[2:]) for k, v in batch.items()}
    adv, ret = adv.reshape(-1), ret.reshape(-1)
    n = adv.numel()
    for _ in range(epochs):
        for idx in torch.randperm(n).split(minibatch):
            logits, value = model(flat["obs"][idx])
            dist = torch.distributions.Categorical(logits=logits)
            ratio = (dist.log_prob(flat["act"][idx]) - flat["logp"][idx]).exp()
            a = (adv[idx] - adv[idx].mean()) / (adv[idx].std() + 1e-8)
            pg = -torch.min(ratio * a, ratio.clamp(0.8, 1.2) * a).mean()
            loss = pg + 0.5 * (value - ret[idx]).pow(2).mean() - 0.01 * dist.entropy().mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", action="store_true", help="step --envs environments together")
    p.add_argument("--steps", type=int, default=8, help="iterations (rollout + update)")
    p.add_argument("--rollout", type=int, default=2048, help="transitions per update")
    p.add_argument("--envs", type=int, default=8)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--minibatch", type=int, default=64)
    args = p.parse_args()

    torch.manual_seed(0)
    rng = random.Random(0)
    n_envs = args.envs if args.fix else 1
    envs = [CartPole(rng) for _ in range(n_envs)]
    obs = [e.reset() for e in envs]
    model = ActorCritic()
    opt = torch.optim.Adam(model.parameters(), lr=3e-4)
    times, collect_s = [], 0.0
    for _ in range(args.steps):
        t0 = time.perf_counter()
        batch, obs = collect(model, envs, obs, args.rollout // n_envs)
        t1 = time.perf_counter()
        update(model, opt, batch, args.epochs, args.minibatch)
        times.append(time.perf_counter() - t0)
        collect_s += t1 - t0
    steady = times[1:] or times
    print(f"steps={len(times)} transitions={len(times) * args.rollout} envs={n_envs} "
          f"mean_iteration_ms={statistics.fmean(steady) * 1000:.1f} "
          f"collect_share={collect_s / sum(times):.3f}")


if __name__ == "__main__":
    main()
