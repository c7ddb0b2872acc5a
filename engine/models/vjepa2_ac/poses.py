"""End-effector poses of the 7-wide action layout the V-JEPA 2-AC model was trained on:
[x, y, z, three extrinsic x-y-z Euler angles (radians), gripper closedness in [0, 1]].
An action is a pose delta of the same layout.

A delta is applied as the upstream world model applies it: translations and the gripper
add (the gripper clipped to [0, 1]); the rotation composes as matrices, R_delta @ R_pose,
and is read back as Euler angles in the canonical range (first and third angle in
[-pi, pi], second in [-pi/2, pi/2]). Rotations are computed in float64.
"""
from __future__ import annotations

import torch

POSE_WIDTH = 7
TRANSLATION, ROTATION, GRIPPER = slice(0, 3), slice(3, 6), slice(6, 7)


def euler_to_matrix(angles: torch.Tensor) -> torch.Tensor:
    """angles [..., 3] (extrinsic rotations about x, then y, then z) -> [..., 3, 3],
    R = Rz @ Ry @ Rx."""
    c, s = angles.cos(), angles.sin()
    one, zero = torch.ones_like(c[..., 0]), torch.zeros_like(c[..., 0])

    def mat(*rows):  # 9 entries [...] -> [..., 3, 3]
        return torch.stack(rows, dim=-1).unflatten(-1, (3, 3))

    rx = mat(one, zero, zero, zero, c[..., 0], -s[..., 0], zero, s[..., 0], c[..., 0])
    ry = mat(c[..., 1], zero, s[..., 1], zero, one, zero, -s[..., 1], zero, c[..., 1])
    rz = mat(c[..., 2], -s[..., 2], zero, s[..., 2], c[..., 2], zero, zero, zero, one)
    return rz @ ry @ rx


def matrix_to_euler(r: torch.Tensor) -> torch.Tensor:
    """[..., 3, 3] -> extrinsic x-y-z Euler angles [..., 3] in the canonical range."""
    first = torch.atan2(r[..., 2, 1], r[..., 2, 2])
    second = torch.asin((-r[..., 2, 0]).clamp(-1.0, 1.0))
    third = torch.atan2(r[..., 1, 0], r[..., 0, 0])
    return torch.stack([first, second, third], dim=-1)


def compose_pose(pose: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """pose, delta [..., 7] -> the pose after the delta [..., 7] (pose's dtype)."""
    rot = euler_to_matrix(delta[..., ROTATION].double()) @ euler_to_matrix(pose[..., ROTATION].double())
    return torch.cat([pose[..., TRANSLATION] + delta[..., TRANSLATION], matrix_to_euler(rot).to(pose.dtype),
                      (pose[..., GRIPPER] + delta[..., GRIPPER]).clamp(0.0, 1.0)], dim=-1)
