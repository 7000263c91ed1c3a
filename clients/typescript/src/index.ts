/**
 * Motor's gRPC contracts (package motor.v1) for TypeScript: the generated messages and service
 * descriptors, typed clients over Connect for Node (gRPC protocol, HTTP/2), and the gateway helper
 * `RoutingTableSync`.
 */
import { createClient, type Client, type Interceptor, type Transport } from "@connectrpc/connect";
import { createGrpcTransport, type GrpcTransportOptions } from "@connectrpc/connect-node";

import "./globals.js";
import { Controller } from "./gen/motor/v1/controller_pb.js";
import { Coordinator } from "./gen/motor/v1/coordinator_pb.js";
import { NodeManager, NodeManagerFaultTolerance } from "./gen/motor/v1/node_manager_pb.js";

export * from "./gen/motor/v1/common_pb.js";
export * from "./gen/motor/v1/controller_pb.js";
export * from "./gen/motor/v1/coordinator_pb.js";
export * from "./gen/motor/v1/node_manager_pb.js";
export * from "./routing.js";

/** gRPC metadata the Coordinator checks on Refresh when it has a management key. */
export const MANAGEMENT_KEY_HEADER = "x-motor-key";

export type ControllerClient = Client<typeof Controller>;
export type CoordinatorClient = Client<typeof Coordinator>;
export type NodeManagerClient = Client<typeof NodeManager>;
export type NodeManagerFaultToleranceClient = Client<typeof NodeManagerFaultTolerance>;

export interface MotorTransportOptions extends Partial<Omit<GrpcTransportOptions, "baseUrl">> {
  /** Sent as `x-motor-key` on every call (the Coordinator requires it on Refresh). */
  managementKey?: string;
}

/**
 * A gRPC (HTTP/2) transport to one Motor service. `address` is `host:port` (plaintext, as the local
 * cluster serves) or a full `http://` / `https://` URL; for TLS pass `nodeOptions` ({ ca, cert, key }).
 */
export function createMotorTransport(address: string, options: MotorTransportOptions = {}): Transport {
  const { managementKey, interceptors = [], ...rest } = options;
  const baseUrl = /^https?:\/\//.test(address) ? address : `http://${address}`;
  return createGrpcTransport({
    baseUrl,
    ...rest,
    interceptors: managementKey === undefined ? interceptors : [managementKeyInterceptor(managementKey), ...interceptors],
  });
}

/** Adds the management key to every request that goes through the transport. */
export function managementKeyInterceptor(key: string): Interceptor {
  return (next) => async (req) => {
    req.header.set(MANAGEMENT_KEY_HEADER, key);
    return next(req);
  };
}

/** Call option headers carrying the management key, for a single call. */
export function managementKeyHeaders(key: string): Record<string, string> {
  return { [MANAGEMENT_KEY_HEADER]: key };
}

export function createControllerClient(address: string | Transport, options?: MotorTransportOptions): ControllerClient {
  return createClient(Controller, typeof address === "string" ? createMotorTransport(address, options) : address);
}

export function createCoordinatorClient(address: string | Transport, options?: MotorTransportOptions): CoordinatorClient {
  return createClient(Coordinator, typeof address === "string" ? createMotorTransport(address, options) : address);
}

export function createNodeManagerClient(address: string | Transport, options?: MotorTransportOptions): NodeManagerClient {
  return createClient(NodeManager, typeof address === "string" ? createMotorTransport(address, options) : address);
}

export function createNodeManagerFaultToleranceClient(
  address: string | Transport,
  options?: MotorTransportOptions,
): NodeManagerFaultToleranceClient {
  return createClient(NodeManagerFaultTolerance, typeof address === "string" ? createMotorTransport(address, options) : address);
}

/**
 * A Refresh revision the Coordinator will accept: greater than the last acknowledged one, and in the
 * Controller's own scheme (wall-clock microseconds), so the Controller's next publication still
 * outruns it.
 */
export function nextRevision(lastAcknowledged: bigint, nowMs: number = Date.now()): bigint {
  const wall = BigInt(Math.floor(nowMs)) * 1000n;
  return wall > lastAcknowledged ? wall : lastAcknowledged + 1n;
}
