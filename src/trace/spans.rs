//! A [`GateTrace`] as OpenTelemetry spans ([`SpanData`]), ready for an
//! exporter. Pure, like the plan it converts.

use std::borrow::Cow;
use std::time::SystemTime;

use opentelemetry::trace::{
    Event as OtelEvent, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};

use super::build::{Attributes, GateTrace, SpanPlan};
use super::ids;

/// The instrumentation scope every span names: nodegate and its version.
pub fn scope() -> InstrumentationScope {
    InstrumentationScope::builder("nodegate")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build()
}

/// The spans of `trace`, root first.
pub fn span_data(trace: &GateTrace, scope: &InstrumentationScope) -> Vec<SpanData> {
    let trace_id = ids::trace_id(&trace.node_uid, trace.root.start);
    let root_id = ids::span_id(trace_id, "");
    let mut spans = Vec::with_capacity(trace.span_count());
    spans.push(one(&trace.root, trace_id, root_id, SpanId::INVALID, scope));
    for member in &trace.members {
        let id = ids::span_id(trace_id, &member.name);
        spans.push(one(member, trace_id, id, SpanId::from(root_id), scope));
    }
    spans
}

fn one(
    plan: &SpanPlan,
    trace_id: u128,
    span_id: u64,
    parent: SpanId,
    scope: &InstrumentationScope,
) -> SpanData {
    let context = SpanContext::new(
        TraceId::from(trace_id),
        SpanId::from(span_id),
        TraceFlags::SAMPLED,
        false,
        TraceState::default(),
    );
    let mut events = SpanEvents::default();
    events.events = plan
        .events
        .iter()
        .map(|e| OtelEvent::new(e.name, SystemTime::from(e.at), key_values(&e.attributes), 0))
        .collect();
    SpanData {
        span_context: context,
        parent_span_id: parent,
        parent_span_is_remote: false,
        span_kind: SpanKind::Internal,
        name: Cow::Owned(plan.name.clone()),
        start_time: SystemTime::from(plan.start),
        end_time: SystemTime::from(plan.end),
        attributes: key_values(&plan.attributes),
        dropped_attributes_count: 0,
        events,
        links: SpanLinks::default(),
        status: match &plan.error {
            Some(why) => Status::error(why.clone()),
            None => Status::Unset,
        },
        instrumentation_scope: scope.clone(),
    }
}

fn key_values(attributes: &Attributes) -> Vec<KeyValue> {
    attributes
        .iter()
        .map(|(k, v)| KeyValue::new(*k, v.clone()))
        .collect()
}
